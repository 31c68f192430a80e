"""Where DAPO's entry module comes from for each verl release, and how to get the one that imports.

verl 0.6.x and 0.7.0 carry `recipe/dapo` in their own tree. From 0.7.1 the recipes live in the
verl-recipe repository, checked out as the verl tree's `recipe/` submodule; the commit verl pins is
not always one that imports with that release. Each choice below was checked by importing
`recipe.dapo.main_dapo` against the real verl wheel of that release (tests/test_recipes.py, with the
recipe source at that commit in tests/fixtures/recipes):

- 0.7.1 pins 6d8d5c1; it imports (main_ppo still has TaskRunner, create_rl_dataset, run_ppo).
- 0.8.0 pins e7f8895; it imports. ac8b84f does not: it needs verl.trainer.main_ppo_v0 (0.9+).
- 0.9.0 pins e7f8895 too, whose main_dapo imports TaskRunner from verl.trainer.main_ppo: 0.9 has
  only TaskRunnerV1 there (TaskRunner moved to main_ppo_v0) -> ImportError. ac8b84f imports
  BaseTaskRunner from main_ppo_v0 and works on 0.9.0 and 0.9.1.

verl 0.9's core v1 trainer (trainer/ppo/v1/replay_buffer.py) has DAPO group filtering of its own,
but its reward and config layout differ from the recipe's; the recipe entry stays the one we run.
"""

from __future__ import annotations

from dataclasses import dataclass

RECIPE_REPO = "https://github.com/verl-project/verl-recipe"


@dataclass(frozen=True)
class RecipeSource:
    """DAPO's source for one release: in verl's own tree, or verl-recipe at `commit`."""

    kind: str  # "in-tree" | "verl-recipe"
    commit: str = ""  # full verl-recipe commit (kind verl-recipe)
    pinned: str = ""  # the commit the release's own submodule pins, when it differs from `commit`
    why: str = ""

    @property
    def short(self) -> str:
        return self.commit[:7]

    def checkout_command(self, run_dir: str, version: str) -> str:
        """The shell command that puts the right DAPO source under run_dir/recipe."""
        if self.kind == "in-tree":
            return f"git clone --branch v{version} https://github.com/verl-project/verl {run_dir}"
        # the submodule first (a plain `git -C recipe` in an uninitialised submodule would act on verl's own repo)
        command = f"cd {run_dir} && git submodule update --init recipe"
        if self.pinned:  # the release pins a commit that does not import with it
            command += f" && git -C recipe fetch --quiet origin && git -C recipe checkout {self.short}"
        return command

    def note(self, version: str) -> str:
        if self.kind == "in-tree":
            return f"DAPO: recipe/dapo is part of the verl {version} source tree; run from a verl checkout (not a wheel)"
        return f"DAPO: verl-recipe {self.short} as the verl tree's recipe/ ({self.why})"


_IN_TREE = RecipeSource("in-tree", why="recipe/dapo ships in the verl tree")
DAPO_SOURCES: dict[str, RecipeSource] = {
    "0.6.0": _IN_TREE,
    "0.6.1": _IN_TREE,
    "0.7.0": _IN_TREE,
    "0.7.1": RecipeSource("verl-recipe", "6d8d5c129334f40b463dc7e383cf269358352fd6",
                          why="the commit verl 0.7.1 pins: `git submodule update --init recipe` gets it"),
    "0.8.0": RecipeSource("verl-recipe", "e7f889574b8301cc0f0fc1d57c6d67f31ffeb689",
                          why="the commit verl 0.8.0 pins; later ones (ac8b84f) need verl.trainer.main_ppo_v0, absent in 0.8"),
    "0.9.0": RecipeSource("verl-recipe", "ac8b84f74cf8cec08bb2ba2f73733c15bd6b8c43", pinned="e7f8895",
                          why="not the pinned e7f8895, whose main_dapo imports TaskRunner from verl.trainer.main_ppo, "
                              "which 0.9 no longer has"),
    "0.9.1": RecipeSource("verl-recipe", "ac8b84f74cf8cec08bb2ba2f73733c15bd6b8c43", pinned="e7f8895",
                          why="not the pinned e7f8895, whose main_dapo imports TaskRunner from verl.trainer.main_ppo, "
                              "which 0.9 no longer has"),
}


def plan_notes(profile, mode: str, version: str) -> list[str]:
    """What the user must know about this release's entry before running it: the profile's notes,
    and for DAPO where its source comes from (shown by `plan`, kept in plan.json)."""
    notes = list(profile.notes)
    if mode in profile.wheel_lacks_entry.get(version, ()):
        notes.append(wheel_lacks_entry_note(version, mode))
    source = dapo_source(version) if mode == "dapo" else None
    if source is not None:
        notes.append(source.note(version))
    return notes


def wheel_lacks_entry_note(version: str, mode: str = "one-step-off") -> str:
    return (f"the verl {version} wheel packages {mode}'s configs but not its .py files: run from a verl "
            f"{version} source checkout (git clone --branch v{version} https://github.com/verl-project/verl; "
            "--run-dir or the container's verl dir), not a pip-installed verl")


def dapo_source(version: str) -> RecipeSource | None:
    """The DAPO source for a release ("0.8.1" falls back to its minor's newest known release)."""
    if version in DAPO_SOURCES:
        return DAPO_SOURCES[version]
    minor = ".".join(version.split(".")[:2]) + "."
    known = sorted((v for v in DAPO_SOURCES if v.startswith(minor)), key=lambda v: [int(p) for p in v.split(".")])
    return DAPO_SOURCES[known[-1]] if known else None
