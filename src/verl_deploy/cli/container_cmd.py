"""`verl-deploy container create IMAGE NAME`: a training container with the device and driver mounts."""

from __future__ import annotations

import os
from typing import Any, Optional

import typer

from verl_deploy.cli import app
from verl_deploy.cli.options import spec_options

container_app = typer.Typer(help="Training containers: create one with the NPU/GPU devices and driver mounts.",
                            no_args_is_help=True)
app.add_typer(container_app, name="container")

EPILOG = """\
Examples:

  verl-deploy container create quay.io/ascend/verl:verl-8.3.rc1-910b-ubuntu22.04-py3.11-v0.7.0 verl-npu

  verl-deploy container create verlai/verl:vllm011.latest verl-gpu --device gpu --yes

An existing running container is reused and a stopped one started; a new one gets the devices
(--devices), /dev/davinci_manager, /dev/devmm_svm, /dev/hisi_hdc, the DCMI library, npu-smi and
the driver files (Ascend) or --gpus all (NVIDIA), host network and IPC, and the model, data and
checkpoint directories at the same paths. Nothing runs before you confirm (or --yes).
"""


@container_app.command("create", epilog=EPILOG)
@spec_options
def create_command(
    image_arg: Optional[str] = typer.Argument(None, metavar="IMAGE", help="Image (default: --image or the verl 0.7.0 Ascend image)."),
    name: Optional[str] = typer.Argument(None, metavar="NAME", help="Container name (default: --container)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    **options: Any,
) -> None:
    """Create (or reuse, or start) the training container."""
    from verl_deploy.backends.container_setup import DockerError, ensure_container, inspect, preflight
    from verl_deploy.cli.confirm import confirm
    from verl_deploy.cli.options import flags_from
    from verl_deploy.cli.output import console, fail
    from verl_deploy.findings import UserError, error
    from verl_deploy.pipeline import Prepared
    from verl_deploy.preflight.saved import load_detected
    from verl_deploy.sources import resolve

    try:
        flags, config_file = flags_from(options)
        if image_arg:
            flags["image"] = image_arg
        if name:
            flags["container"] = name
        detected = {} if options.get("ignore_detected") else load_detected()[0]
        spec = resolve(flags=flags, environ=os.environ, config_file=config_file, detected=detected)
        if not spec.container:
            raise UserError([error("NAME", "no container name", "verl-deploy container create IMAGE NAME")])
    except UserError as exc:
        raise fail(exc.findings) from None
    err = console(stderr=True)
    try:
        if not inspect(spec.container).exists:  # refused before the confirmation, nothing started
            preflight(spec)
        confirm(Prepared(spec, None), f"container {spec.container} from {spec.image}", yes=yes)
        state = ensure_container(spec, say=lambda text: err.print(f"[dim]{text}[/]"),
                                 warn=lambda text: err.print(f"[yellow]warning:[/] {text}"))
    except DockerError as exc:
        raise fail([error("container", str(exc), exc.fix)]) from None
    console().print(f"container [bold]{state.name}[/] is {state.status} ({state.image})")
