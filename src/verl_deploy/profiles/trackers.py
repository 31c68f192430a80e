"""verl's experiment trackers (`trainer.logger`), per release, and the environment each one reads.

Read in verl/utils/tracking.py at v0.6.0, v0.6.1, v0.7.0, v0.7.1, v0.8.0 and v0.9.0: `Tracking`
asserts every name is in `supported_backend` (wandb, mlflow, swanlab, vemlp_wandb, tensorboard,
console, clearml, trackio, file; 0.9.0 adds rl_insight) and then, per name:

- wandb: `wandb.init(project, name, entity=$WANDB_ENTITY, ...)`; the wandb package reads
  WANDB_API_KEY (or a `wandb login` in ~/.netrc), WANDB_BASE_URL, WANDB_MODE, WANDB_DIR.
- mlflow: `mlflow.set_tracking_uri($MLFLOW_TRACKING_URI or sqlite:////tmp/mlruns.db)`, attaches
  to $MLFLOW_RUN_ID when set; mlflow reads MLFLOW_TRACKING_USERNAME/PASSWORD/TOKEN for a server.
- vemlp_wandb: `volcengine_ml_platform.init(ak=os.environ["VOLC_ACCESS_KEY_ID"],
  sk=os.environ["VOLC_SECRET_ACCESS_KEY"], region=os.environ["MLP_TRACKING_REGION"])`: all three
  are required (a KeyError otherwise).
- tensorboard: writes to $TENSORBOARD_DIR or tensorboard_log/{project}/{experiment}.
- clearml: `clearml.Task.init(...)`; clearml reads CLEARML_API_HOST, CLEARML_WEB_HOST,
  CLEARML_FILES_HOST, CLEARML_API_ACCESS_KEY, CLEARML_API_SECRET_KEY (or ~/clearml.conf).
- swanlab: SWANLAB_API_KEY, SWANLAB_LOG_DIR, SWANLAB_MODE (swanlab_env.py has the rest).
- console: stdout (the `step:N - key:value` lines the watcher reads).
- file: verl's FileLogger, JSON lines at $VERL_FILE_LOGGER_PATH or
  $VERL_FILE_LOGGER_ROOT/{project}/{experiment}.jsonl (default root: the working directory).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# `-o trainer.logger=[console,wandb]` (also ++/+): read as --logger (spec.py)
LOGGER_OVERRIDE = re.compile(r"^\+{0,2}trainer\.logger=(.*)$")

COMMON = ("wandb", "mlflow", "swanlab", "vemlp_wandb", "tensorboard", "console", "clearml", "trackio", "file")
# release prefix -> the names its Tracking accepts
SUPPORTED: dict[str, tuple[str, ...]] = {"0.6": COMMON, "0.7": COMMON, "0.8": COMMON, "0.9": (*COMMON, "rl_insight")}
# what verl-deploy offers (--logger): the trackers whose environment it knows
OFFERED = ("console", "wandb", "swanlab", "mlflow", "tensorboard", "clearml", "vemlp_wandb", "file")


@dataclass(frozen=True)
class Tracker:
    name: str
    env: tuple[str, ...] = ()  # settings read from the environment (handed to the run in trackers.env)
    secrets: tuple[str, ...] = ()  # of env: credentials (never in argv, scripts, logs or output)
    required: tuple[str, ...] = ()  # verl fails at start without these
    login: str = ""  # where the tracker finds a login when the credential is not in the environment
    link_hint: str = ""  # what the tracker prints that the report links


TRACKERS: dict[str, Tracker] = {t.name: t for t in (
    Tracker("console"),
    Tracker("swanlab"),  # its own flow: --swanlab-*, swanlab.env, `verl-deploy swanlab login`
    Tracker("wandb", env=("WANDB_API_KEY", "WANDB_ENTITY", "WANDB_BASE_URL", "WANDB_MODE", "WANDB_DIR"),
            secrets=("WANDB_API_KEY",), login="`wandb login` on the training node (~/.netrc)",
            link_hint="wandb: 🚀 View run NAME at: URL"),
    Tracker("mlflow", env=("MLFLOW_TRACKING_URI", "MLFLOW_RUN_ID", "MLFLOW_TRACKING_USERNAME",
                           "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"),
            secrets=("MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"), link_hint="🏃 View run NAME at: URL"),
    Tracker("tensorboard", env=("TENSORBOARD_DIR",)),
    # verl's own FileLogger (verl/utils/tracking.py, every supported tag): JSON lines at $VERL_FILE_LOGGER_PATH,
    # else $VERL_FILE_LOGGER_ROOT (default: the working directory)/project/experiment.jsonl
    Tracker("file", env=("VERL_FILE_LOGGER_PATH", "VERL_FILE_LOGGER_ROOT")),
    Tracker("clearml", env=("CLEARML_API_HOST", "CLEARML_WEB_HOST", "CLEARML_FILES_HOST", "CLEARML_API_ACCESS_KEY",
                            "CLEARML_API_SECRET_KEY"), secrets=("CLEARML_API_ACCESS_KEY", "CLEARML_API_SECRET_KEY"),
            login="~/clearml.conf on the training node (`clearml-init`)", link_hint="ClearML results page: URL"),
    Tracker("vemlp_wandb", env=("VOLC_ACCESS_KEY_ID", "VOLC_SECRET_ACCESS_KEY", "MLP_TRACKING_REGION"),
            secrets=("VOLC_ACCESS_KEY_ID", "VOLC_SECRET_ACCESS_KEY"),
            required=("VOLC_ACCESS_KEY_ID", "VOLC_SECRET_ACCESS_KEY", "MLP_TRACKING_REGION")),
)}


def supported(verl_version: str) -> tuple[str, ...]:
    """The trackers verl-deploy offers that this verl release's Tracking accepts."""
    minor = ".".join(verl_version.split(".")[:2])
    accepted = SUPPORTED.get(minor, COMMON)
    return tuple(name for name in OFFERED if name in accepted)
