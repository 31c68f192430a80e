"""Version profiles: the only code that knows verl's keys. Pick one with ``profile_for``."""

from __future__ import annotations

from verl_deploy.findings import Finding, error, warning
from verl_deploy.profiles.base import Key, Profile
from verl_deploy.verl_release import release_numbers, release_of
from verl_deploy.profiles import verl_0_6, verl_0_7_0, verl_0_8, verl_0_9

PROFILES: tuple[Profile, ...] = (verl_0_6.PROFILE, verl_0_7_0.PROFILE, verl_0_8.PROFILE, verl_0_9.PROFILE)
SUPPORTED = "0.6.0, 0.6.1, 0.7.0, 0.7.1, 0.8.x, 0.9.x"


def profile_for(version: str) -> Profile | Finding:
    """The profile serving `version`, or an error finding naming the supported versions."""
    release = release_of(version)
    for profile in PROFILES:
        if profile.serves(release):
            return profile
    if _minor(release) > max(_minor(m) for p in PROFILES for m in p.matches):
        # newer than this tool knows: downgrading verl is rarely what the user wants, nor "upgrade"
        return error("verl_version", f"verl {version} is newer than this verl-deploy knows (supported: {SUPPORTED})",
                     "update verl-deploy to a release that knows it, or pass --nearest-profile to plan it with the "
                     "newest profile here (verl's own validation then runs)")
    return error("verl_version", f"verl {version} is not supported (supported: {SUPPORTED})",
                 "pass --verl-version with a supported version, or use an image/checkout with a supported verl")


def nearest_profile(version: str) -> Profile | None:
    """The newest profile older than a release this tool has no profile for (0.10.0.dev -> the 0.9 profile)."""
    wanted = _minor(version.split("+")[0])
    older = [p for p in PROFILES if max(_minor(m) for m in p.matches) < wanted]
    return max(older, key=lambda p: max(_minor(m) for m in p.matches)) if older else None


def profile_for_spec(spec) -> tuple[Profile | Finding, Finding | None]:
    """The profile a spec plans with, and the warning when --nearest-profile stood in for a missing one."""
    profile = profile_for(spec.verl_version)
    if isinstance(profile, Profile) or not getattr(spec, "nearest_profile", False):
        return profile, None
    near = nearest_profile(spec.verl_version)
    if near is None:
        return profile, None
    return near, warning("verl_version", f"verl {spec.verl_version} has no profile in this verl-deploy: planned with "
                         f"the {near.name} profile (--nearest-profile); keys verl {spec.verl_version} renamed or added "
                         "are unknown to it, so verl's own validation decides",
                         "make sure `verl-deploy plan --verify` passes before a launch (plan runs it for you); update "
                         "verl-deploy when it knows this release")


def knob_overrides(spec, **values) -> list[str]:
    """`key=value` overrides that set knobs for this spec's release, framework, device and mode (recovery's resume
    settings, for one): the profile names the keys, the caller only the knobs."""
    profile, _ = profile_for_spec(spec)
    if not isinstance(profile, Profile):
        raise ValueError(profile.line())
    found = []
    for knob, value in values.items():
        for key in profile.keys_for(knob, spec.framework, spec.device, spec.mode):
            found.append(f"{'+' if key.plus else ''}{key.path}={key.value_for(value)}")
    return found


def _minor(version: str) -> tuple[int, int]:
    """(major, minor) of "0.9.1" or "0.9."; unparsable counts as (0, 0)."""
    return release_numbers(version)[:2]


__all__ = ["Key", "Profile", "PROFILES", "SUPPORTED", "nearest_profile", "profile_for", "profile_for_spec"]
