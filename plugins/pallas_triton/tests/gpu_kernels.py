def aot_cases(): return {}
