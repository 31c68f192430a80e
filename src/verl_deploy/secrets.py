"""The one secret verl-deploy keeps: the SwanLab API key, in a 0600 file under the user's config dir.

It is read from `SWANLAB_API_KEY` first; the file is only the remembered answer of `init` or
`swanlab login`. It never goes into a config file, a command line, a script or a log.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from verl_deploy import boundedread
from verl_deploy.statedir import config_dir

KEY_FILE = "swanlab_api_key"


def key_path() -> Path:
    return config_dir() / KEY_FILE


def save_swanlab_key(key: str) -> Path:
    """Write the key with mode 0600 from the start (no moment where others could read it)."""
    path = key_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = path.with_name(path.name + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(key.strip() + "\n")
    os.chmod(tmp, 0o600)
    tmp.replace(path)
    return path


MAX_KEY_BYTES = 4096  # a SwanLab key is a few dozen characters


def load_swanlab_key() -> str | None:
    """The saved key; None when there is none. UnreadableFile (one line, never the key itself) when the file
    is damaged: not UTF-8, huge, a FIFO or a device."""
    try:
        key = boundedread.read_text(key_path(), MAX_KEY_BYTES).strip()
    except (FileNotFoundError, NotADirectoryError):
        return None
    return key or None


# The last four characters help tell two keys apart; on a short key they are most of the key.
SHOW_TAIL_FROM = 12


def mask_secret(key: str) -> str:
    """`****` plus the last four characters, only when the key is long enough that they give little away."""
    return "****" + key[-4:] if len(key) >= SHOW_TAIL_FROM else "****"


# an environment variable whose name says it holds a secret (SWANLAB_API_KEY, HF_TOKEN, AWS_SECRET_ACCESS_KEY, ...)
SECRET_NAME = re.compile(r"(^|_)(TOKEN|KEY|SECRET)$|PASSWORD|PASSWD|API_?KEY|SECRET_", re.IGNORECASE)
# OmegaConf's environment resolvers (oc.env; `env` in OmegaConf < 2.1), as Hydra text reads them
ENV_INTERPOLATION = re.compile(r"\$\{\s*(?:oc\.env|env)\s*:\s*['\"]?([^,}'\"\s]+)")


def is_secret_name(name: str) -> bool:
    return bool(SECRET_NAME.search(name))


def secret_interpolation(text: str) -> str | None:
    """The secret environment variable an override's text reads through `${oc.env:NAME}`, or None."""
    for match in ENV_INTERPOLATION.finditer(text):
        if is_secret_name(match.group(1)):
            return match.group(1)
    return None
