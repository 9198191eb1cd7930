"""sglops tasks: `inv --list`. Each task parses flags and calls the sglops library; no logic here."""

from invoke import task

from sglops import cli
from sglops.cli import Targets


# -- foundation -----------------------------------------------------------------------------
@task(help=cli.help_with())
def facts(c, host=None, hosts=None, tag=None, sglang_root=None, accept_new_host_key=False, json=False):
    """What is on the host: GPUs, compute capability, driver/CUDA, Python, torch, FlashInfer, SGLang."""
    from sglops.facts import gather

    cli.per_host("facts", Targets(host, hosts, tag, sglang_root, accept_new_host_key), gather,
                 json=json, artifact="facts.json")


@task(help={"hosts": "number of sandbox hosts", "base": "folder for the sandbox (default .cache/sandbox)"})
def sandbox(c, action, hosts=2, base=None):
    """Bring local sandbox GPU hosts up or down (real sshd on loopback, real SGLang trees): up|down|status."""
    from sglops.sandbox import cli as sandbox_cli

    cli.guarded(sandbox_cli.main, action, hosts=int(hosts), base=base)
