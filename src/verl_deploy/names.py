"""The grammars of the names we hand to other tools: docker, ssh, the kernel, Hydra's paths.

A name that reaches `docker run`, `ssh` or `cd` as an argument must never be read as an
option (`--privileged`, `-Eout.log`, `cd -`), nor carry a newline into a script. Each check
here is the tool's own grammar (docker's container-name pattern, the distribution image
reference grammar, RFC 1123 host names and IP addresses, the kernel's interface names,
Linux path limits), so a valid name is never refused and an invalid one is one line with
the fix. Each raises ``NameProblem`` (a ValueError with a ``fix``).
"""

from __future__ import annotations

import ipaddress
import re

PATH_MAX = 4096  # Linux PATH_MAX, bytes with the terminating NUL
NAME_MAX = 255  # one path component, bytes


class NameProblem(ValueError):
    """What is wrong with a name, and `fix`: how to write it."""

    def __init__(self, message: str, fix: str):
        super().__init__(message)
        self.fix = fix


def utf8(text: object) -> object:
    """Text that can be written as UTF-8 (scripts, records, JSON). A non-UTF-8 byte in argv or the environment
    arrives as a lone surrogate (PEP 383) and would fail the write later with a traceback."""
    if isinstance(text, str):
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            byte = text[exc.start].encode("utf-8", "surrogateescape")
            shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
            shown = shown if len(shown) <= 60 else shown[:57] + "..."
            raise NameProblem(f"'{shown}' holds the byte 0x{byte.hex()}, which is not UTF-8",
                              "rename it with UTF-8 characters only (or use a symlink whose name is UTF-8)") from None
    return text


# C1 controls and the bidirectional formatting characters (Unicode TR9: embeddings, overrides, isolates, marks):
# shown in a terminal or an editor they reorder what is read around them ("Trojan Source", CVE-2021-42574), so
# `plan`, a script or a log would show another name than the one used
_INVISIBLE = re.compile("[\u0080-\u009f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def _invisible(text: str, what: str) -> None:
    found = _INVISIBLE.search(text)
    if found:
        raise NameProblem(f"{what} {ascii(text)[:80]} contains U+{ord(found.group()):04X}, an invisible control or "
                          "text-direction character that makes it display as another name",
                          f"retype the {what} without it (e.g. copy it from `ls`, not from a web page)")


def _shown(text: str) -> str:
    return repr(text if len(text) <= 60 else text[:57] + "...")


def _plain(text: object, what: str, fix: str) -> str:
    if not isinstance(text, str):
        raise NameProblem(f"{what} must be text, got a {type(text).__name__}", fix)
    if not text:
        raise NameProblem(f"{what} is empty", fix)
    if re.search(r"[\x00-\x20\x7f]", text):
        raise NameProblem(f"{what} {_shown(text)} contains a space or control character (newline, tab, ...)", fix)
    _invisible(text, what)
    if text.startswith("-"):
        raise NameProblem(f"{what} {_shown(text)} starts with '-', so a tool would read it as an option", fix)
    return text


# docker: daemon/names.go, restrictedNamePattern = ^/?[a-zA-Z0-9][a-zA-Z0-9_.-]+$ (IDs match it too)
_CONTAINER = re.compile(r"/?[a-zA-Z0-9][a-zA-Z0-9_.-]+")


def container_name(text: object) -> str:
    fix = "use letters, digits, '_', '.' and '-', starting with a letter or digit, e.g. verl-npu"
    name = _plain(text, "container name", fix)
    if len(name) > 128 or not _CONTAINER.fullmatch(name):
        raise NameProblem(f"container name {_shown(name)} is not a valid docker container name", fix)
    return name


# github.com/distribution/reference: reference := name [":" tag] ["@" digest]
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9A-Fa-f:.]+\])(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[_.]|__|-+)[a-z0-9]+)*"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_IMAGE = re.compile(rf"(?P<name>{_NAME})(?::{_TAG})?(?:@{_DIGEST})?")


def image_reference(text: object) -> str:
    fix = "give an image reference like quay.io/ascend/verl:TAG or verlai/verl:TAG (lowercase repository)"
    name = _plain(text, "image", fix)
    match = _IMAGE.fullmatch(name)
    first = name.split("/", 1)[0]
    is_domain = "/" in name and ("." in first or ":" in first or first == "localhost")
    if not match or len(match.group("name")) > 255 or ("/" in name and not is_domain and first != first.lower()):
        raise NameProblem(f"image {_shown(name)} is not a valid image reference", fix)
    return name


# RFC 1123 host names (labels of letters, digits and inner '-', at most 63; 253 in all) or an IP address
_LABEL = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?")


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text.strip("[]") if text.startswith("[") and text.endswith("]") else text)
    except ValueError:
        return False
    return True


def host_name(text: object, what: str = "host") -> str:
    fix = "give a host name (RFC 1123, e.g. node-1.cluster) or an IP address, e.g. 10.0.0.1"
    name = _plain(text, what, fix)
    if _is_ip(name):
        return name
    labels = name.rstrip(".").split(".")
    if len(name) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise NameProblem(f"{what} {_shown(name)} is not a host name or an IP address", fix)
    if re.fullmatch(r"[0-9.]+", name):
        raise NameProblem(f"{what} {_shown(name)} is not a valid IP address", fix)
    return name


# ssh destinations: [user@]host (POSIX portable user names)
_USER = re.compile(r"[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?")


def ssh_destination(text: object) -> str:
    fix = "give a node as HOST or USER@HOST (an SSH config alias is fine if it is a valid host name)"
    name = _plain(text, "node", fix)
    user, at, host = name.rpartition("@")
    if at and not _USER.fullmatch(user):
        raise NameProblem(f"node {_shown(name)}: {user!r} is not a user name", fix)
    host_name(host, "node")
    return name


def interface_names(text: object) -> str:
    """An interface for HCCL/NCCL/GLOO_SOCKET_IFNAME: kernel names (dev_valid_name), comma separated,
    optionally NCCL's leading '^' (exclude) or '=' (exact)."""
    fix = "give an interface name as `ip link` shows it, e.g. eth0 or enp189s0f0 (comma separated for several)"
    value = _plain(text, "interface", fix)
    body = value[1:] if value[0] in "^=" else value
    for name in body.split(","):
        if not name or len(name) > 15 or name in (".", "..") or re.search(r"[/:\s]", name) or name.startswith("-"):
            raise NameProblem(f"interface {_shown(name)} is not a Linux interface name (1-15 characters, "
                              "no '/', ':' or spaces)", fix)
    return value


def path(text: object, what: str = "path") -> str:
    """A path a script will `cd` to or a tool will open: Linux limits, no control characters, no leading '-'."""
    fix = f"give the {what} as a normal path, e.g. /data/x (write ./-x for a name that starts with '-')"
    if not isinstance(text, str):
        raise NameProblem(f"{what} must be text, got a {type(text).__name__}", fix)
    if not text.strip():
        raise NameProblem(f"{what} is empty", fix)
    if re.search(r"[\x00-\x1f\x7f]", text):
        raise NameProblem(f"{what} {_shown(text)} contains a control character (newline, tab, ...)", fix)
    _invisible(text, what)
    if text.startswith("-"):
        raise NameProblem(f"{what} {_shown(text)} starts with '-', so a tool would read it as an option", fix)
    encoded = text.encode("utf-8", "surrogateescape")
    if len(encoded) >= PATH_MAX:
        raise NameProblem(f"{what} is {len(encoded)} bytes long; Linux allows {PATH_MAX - 1}", fix)
    longest = max((len(part) for part in encoded.split(b"/")), default=0)
    if longest > NAME_MAX:
        raise NameProblem(f"{what} has a {longest}-byte component; Linux allows {NAME_MAX}", fix)
    return text


def label(text: object, what: str, limit: int = 256) -> str:
    """Free text that goes into an environment variable or a script (workspace, project): one bounded line."""
    fix = f"give the {what} as one line of at most {limit} characters"
    if not isinstance(text, str):
        raise NameProblem(f"{what} must be text, got a {type(text).__name__}", fix)
    if not text.strip():
        raise NameProblem(f"{what} is empty", fix)
    if re.search(r"[\x00-\x1f\x7f]", text) or len(text) > limit:
        raise NameProblem(f"{what} {_shown(text)} contains a control character or is longer than {limit}", fix)
    _invisible(text, what)
    return text


def path_segment(text: object, what: str) -> str:
    """A label that becomes one directory name (verl's checkpoints/PROJECT/EXPERIMENT): no '/', no '..',
    no leading '.', so the directory stays inside its root and is not hidden."""
    value = label(text, what, limit=NAME_MAX)
    fix = f"give the {what} as one directory name, without '/' and not starting with '.', e.g. dapo-qwen3-8b"
    if "/" in value:
        raise NameProblem(f"{what} {_shown(value)} contains '/', and it becomes a directory name", fix)
    if value.startswith("."):
        raise NameProblem(f"{what} {_shown(value)} starts with '.' ('..' leaves the checkpoint root, '.x' is hidden)", fix)
    if len(value.encode("utf-8", "surrogateescape")) > NAME_MAX:
        raise NameProblem(f"{what} {_shown(value)} is longer than {NAME_MAX} bytes, the limit for one directory name", fix)
    return value


def url(text: object, what: str = "URL") -> str:
    """An http(s) URL for SwanLab's host or a proxy: scheme, a valid host, an optional port and path."""
    from urllib.parse import urlsplit

    fix = f"give the {what} as http://HOST:PORT, e.g. http://10.0.0.1:8000"
    value = _plain(text, what, fix)
    if len(value) > 2048:
        raise NameProblem(f"{what} is {len(value)} characters long (at most 2048)", fix)
    try:
        parts = urlsplit(value)
        port = parts.port
    except ValueError as exc:
        raise NameProblem(f"{what} {_shown(value)} is not a URL: {exc}", fix) from None
    if parts.scheme not in ("http", "https", "socks5", "socks5h") or not parts.hostname:
        raise NameProblem(f"{what} {_shown(value)} is not an http(s) URL", fix)
    host_name(parts.hostname, f"{what} host")
    if port == 0:
        raise NameProblem(f"{what} {_shown(value)} has port 0", fix)
    return value
