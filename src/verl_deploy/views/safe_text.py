"""Text from a log, made safe to print on a terminal: the one function every view uses.

A training writes whatever it likes into its log, and a terminal obeys what it prints: OSC
sequences set the title, write the clipboard (OSC 52) or hide a link (OSC 8); CSI sequences
move the cursor and clear the screen; a carriage return overwrites what came before it on the
line; bidirectional overrides reorder what is read. Rich removes only a few of these (BEL,
backspace, CR...), not ESC. Here colour codes (SGR, `ESC [ ... m`) are dropped, and every
other control character is shown as its visible picture (ESC as ␛, BEL as ␇, CR as ␍; C1 and
bidi controls as `\\u009b`), so the text stays readable and can do nothing. `logs --raw` is
the one way to get the bytes as written.
"""

from __future__ import annotations

import re

SGR = re.compile(r"\x1b\[[0-9;:]{0,64}m")
# C0 but tab, DEL, C1, and the bidi embeddings, overrides and isolates (line and paragraph separators too)
CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069\u200e\u200f\u061c]")


def _picture(match: re.Match) -> str:
    char = match.group()
    code = ord(char)
    if code < 0x20:
        return chr(0x2400 + code)  # ␀ .. ␟
    if code == 0x7F:
        return "\u2421"  # ␡
    return f"\\u{code:04x}"


def neutralise(text: str) -> str:
    """`text` with colour codes dropped and every other control character made visible and inert (one line in, one out)."""
    if text.isprintable():  # the common case: nothing to do
        return text
    return CONTROL.sub(_picture, SGR.sub("", text))
