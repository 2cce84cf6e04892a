"""Text a plugin hands over (an exception message, a name, a version), made
safe to print: a terminal must show it, not obey it. ANSI/OSC escape
sequences (clear the screen, set the window title, hyperlinks), other control
characters and invisible bidirectional overrides are written as Python
escapes (``\\x1b``, ``\\u202e``); newlines and tabs stay."""

from __future__ import annotations

import unicodedata

_KEEP = "\n\t"


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 \
        else f"\\U{code:08x}"


def printable(text: object) -> str:
    """``str(text)`` with control and format characters escaped (see the module doc)."""
    s = str(text)
    if s.isprintable() and "\x1b" not in s:
        return s
    return "".join(_escape(ch) if ch not in _KEEP and
                   unicodedata.category(ch) in ("Cc", "Cf", "Cs", "Co", "Zl", "Zp") else ch
                   for ch in s)
