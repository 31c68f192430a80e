"""Version profiles: the only code that knows verl's keys. Pick one with ``profile_for``."""

from __future__ import annotations

from verl_deploy.findings import Finding, error
from verl_deploy.profiles.base import Key, Profile
from verl_deploy.profiles import verl_0_6, verl_0_7_0, verl_0_8, verl_0_9

PROFILES: tuple[Profile, ...] = (verl_0_6.PROFILE, verl_0_7_0.PROFILE, verl_0_8.PROFILE, verl_0_9.PROFILE)
SUPPORTED = "0.6.0, 0.6.1, 0.7.0, 0.7.1, 0.8.x, 0.9.x"


def profile_for(version: str) -> Profile | Finding:
    """The profile serving `version`, or an error finding naming the supported versions."""
    release = version.split("+")[0]
    for suffix in (".dev", "rc", "a", "b", ".post"):
        head, sep, _ = release.partition(suffix)
        if sep and head[:1].isdigit():
            release = head
            break
    for profile in PROFILES:
        if profile.serves(release):
            return profile
    if _minor(release) > max(_minor(m) for p in PROFILES for m in p.matches):
        # newer than this tool knows: downgrading verl is rarely what the user wants, nor "upgrade"
        return error("verl_version", f"verl {version} is newer than this verl-deploy knows (supported: {SUPPORTED})",
                     "update verl-deploy to a release that knows it, or target a supported verl with --verl-version "
                     "(and its image/checkout)")
    return error("verl_version", f"verl {version} is not supported (supported: {SUPPORTED})",
                 "pass --verl-version with a supported version, or use an image/checkout with a supported verl")


def _minor(version: str) -> tuple[int, int]:
    """(major, minor) of "0.9.1" or "0.9."; unparsable counts as (0, 0)."""
    parts = [p for p in version.split(".") if p][:2]
    try:
        return int(parts[0]), int(parts[1]) if len(parts) > 1 else 0
    except (ValueError, IndexError):
        return 0, 0


__all__ = ["Key", "Profile", "PROFILES", "SUPPORTED", "profile_for"]
