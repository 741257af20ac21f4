"""The ``jitwatch`` command line (typer). Commands stay thin; their logic lives in modules.

* ``jitwatch serve`` — run the sidecar (:func:`jitwatch.sidecar.run`).
* ``jitwatch status`` — fetch ``/jit`` from a running sidecar and print it as tables.

Option defaults come from :meth:`jitwatch.config.Settings.from_env` (``JITWATCH_*`` variables).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from jitwatch.config import ConfigError, Settings

app = typer.Typer(
    name="jitwatch",
    help="Observability for Triton JIT compilation in LLM inference workers.",
    no_args_is_help=True,
    add_completion=False,
)


def _settings() -> Settings:
    try:
        return Settings.from_env()
    except ConfigError as exc:
        typer.echo(f"jitwatch: {exc}", err=True)
        raise typer.Exit(2) from None


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Bind address [default: JITWATCH_HOST or 127.0.0.1].")] = None,
    port: Annotated[int | None, typer.Option(min=0, max=65535, help="Port [default: JITWATCH_PORT or 9400].")] = None,
    journal_dir: Annotated[
        Path | None, typer.Option(help="Journal directory [default: JITWATCH_DIR or ~/.local/state/jitwatch].")
    ] = None,
    token: Annotated[
        str | None,
        typer.Option(help="Bearer token for every endpoint but /livez and /readyz [default: JITWATCH_TOKEN]."),
    ] = None,
) -> None:
    """Run the sidecar: /jit, /jit/events, /metrics, /livez, /readyz."""
    from jitwatch.sidecar import run

    run(host, port, journal_dir, token, settings=_settings())


@app.command()
def status(
    url: Annotated[
        str | None, typer.Option(help="Sidecar base URL [default: http://JITWATCH_HOST:JITWATCH_PORT].")
    ] = None,
    token: Annotated[str | None, typer.Option(help="Bearer token [default: JITWATCH_TOKEN].")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the raw /jit JSON instead of tables.")] = False,
    timeout: Annotated[float, typer.Option(min=0.1, help="HTTP timeout, seconds.")] = 5.0,
) -> None:
    """Fetch /jit from a running sidecar and print ranks, kernels and serving-phase compiles."""
    import httpx
    from rich.console import Console

    from jitwatch.sidecar import is_all_interfaces
    from jitwatch.status import JitStatus, render_status

    settings = _settings()
    if url is None:
        host = "127.0.0.1" if is_all_interfaces(settings.host) else settings.host
        host = f"[{host}]" if ":" in host and not host.startswith("[") else host
        url = f"http://{host}:{settings.port}"
    token = token if token is not None else settings.token
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    try:
        resp = httpx.get(url.rstrip("/") + "/jit", headers=headers, timeout=timeout)
    except httpx.HTTPError as exc:
        typer.echo(f"jitwatch: cannot reach {url}: {exc}", err=True)
        raise typer.Exit(1) from None
    if resp.status_code != 200:
        typer.echo(f"jitwatch: {url}/jit answered {resp.status_code}: {resp.text.strip()[:500]}", err=True)
        raise typer.Exit(1)
    st = JitStatus.model_validate(resp.json())
    if as_json:
        typer.echo(json.dumps(st.model_dump(mode="json"), indent=2))
        return
    render_status(st, Console())


@app.command()
def demo(
    host: Annotated[str, typer.Option(help="Sidecar bind address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="Sidecar port.")] = 9400,
    journal_dir: Annotated[
        Path | None,
        typer.Option(help="Journal directory, reset at start (default: a 'demo' subdirectory of JITWATCH_DIR)."),
    ] = None,
    no_warmup: Annotated[
        bool, typer.Option("--no-warmup", help="Skip the slot-mapping warmup (it then compiles on the first request).")
    ] = False,
    specialize_num_tokens: Annotated[
        bool,
        typer.Option(
            "--specialize-num-tokens",
            help="Use the kernel without do_not_specialize=['num_tokens'] (recompiles per request-size class).",
        ),
    ] = False,
    exit_after: Annotated[
        bool, typer.Option("--exit", help="Exit after the scenario instead of serving until Ctrl-C.")
    ] = False,
    keep_triton_cache: Annotated[
        bool,
        typer.Option("--keep-triton-cache", help="Use your TRITON_CACHE_DIR instead of a fresh temporary one."),
    ] = False,
    output_dir: Annotated[
        Path | None, typer.Option(help="Also write the final /jit, /metrics and the /readyz history here.")
    ] = None,
) -> None:
    """Run a sidecar and a demo worker with real Triton compiles (GPU, or compile-only on CPU)."""
    from jitwatch.demo import DemoError, DemoOptions, run_demo

    opts = DemoOptions(
        host=host,
        port=port,
        journal_dir=journal_dir,
        no_warmup=no_warmup,
        specialize_num_tokens=specialize_num_tokens,
        exit_after=exit_after,
        keep_triton_cache=keep_triton_cache,
        output_dir=output_dir,
    )
    try:
        run_demo(opts)
    except DemoError as exc:
        typer.echo(f"jitwatch demo: {exc}", err=True)
        raise typer.Exit(1) from None


# ---------------------------------------------------------------------------------------- manifests
manifest_app = typer.Typer(help="Warmup manifests: record what compiled, from the journal.", no_args_is_help=True)
warmup_app = typer.Typer(help="Warmup: precompile a manifest's kernels before serving.", no_args_is_help=True)
app.add_typer(manifest_app, name="manifest")
app.add_typer(warmup_app, name="warmup")

AllowOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--allow",
        help="Module prefix that may be imported by name (repeatable), e.g. --allow vllm. Nothing else is imported.",
    ),
]


@manifest_app.command("export")
def manifest_export(
    output: Annotated[Path, typer.Option("-o", "--output", help="Manifest file to write (JSON).")],
    journal_dir: Annotated[Path | None, typer.Option(help="Journal directory [default: JITWATCH_DIR].")] = None,
    all_phases: Annotated[
        bool, typer.Option("--all-phases", help="Record every compile, not only serving-phase ones.")
    ] = False,
    allow: AllowOpt = None,
    rank: Annotated[int | None, typer.Option(help="Only this rank's compiles.")] = None,
) -> None:
    """Write the journal's serving-phase compiles (or all) as a warmup manifest."""
    from jitwatch.journal import JournalCorruptError
    from jitwatch.manifest import export

    jdir = journal_dir or _settings().journal_dir
    try:
        manifest, problems = export(jdir, output, all_phases=all_phases, allow=allow or [], rank=rank)
    except (FileNotFoundError, JournalCorruptError) as exc:
        typer.echo(f"jitwatch: {exc}", err=True)
        raise typer.Exit(1) from None
    typer.echo(
        f"wrote {output}: {len(manifest.entries)} specializations of {len(manifest.kernels())} kernels "
        f"({', '.join(manifest.phases)})"
    )
    for kernel, why in problems.items():
        typer.echo(f"  no source hash for {kernel}: {why}", err=True)


@warmup_app.command("replay")
def warmup_replay(
    file: Annotated[Path, typer.Argument(help="Manifest written by `jitwatch manifest export`.")],
    allow: AllowOpt = None,
    parallel: Annotated[str, typer.Option(help="auto / serial / threads / processes.")] = "auto",
    workers: Annotated[int | None, typer.Option(min=1, help="Pool size [default: CPU count, at most 8].")] = None,
    compile_only: Annotated[
        bool | None,
        typer.Option(
            "--compile-only/--gpu", help="Compile for the recorded target without a GPU [default: when no GPU]."
        ),
    ] = None,
    arch: Annotated[int, typer.Option(help="Compute capability for --compile-only (90 = sm_90).")] = 90,
    as_json: Annotated[bool, typer.Option("--json", help="Print the replay report as JSON.")] = False,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.")] = False,
) -> None:
    """Precompile every manifest entry (nothing is launched); exit 1 if any entry failed."""
    from rich.console import Console

    from jitwatch.compile_only import activate, gpu_available
    from jitwatch.manifest import ManifestError, load
    from jitwatch.replay import replay

    if parallel not in ("auto", "serial", "threads", "processes"):
        typer.echo("jitwatch: --parallel must be auto, serial, threads or processes", err=True)
        raise typer.Exit(2)
    try:
        manifest = load(file)
    except ManifestError as exc:
        typer.echo(f"jitwatch: {exc}", err=True)
        raise typer.Exit(2) from None
    use_compile_only = (not gpu_available()) if compile_only is None else compile_only
    console = Console(stderr=True)
    if use_compile_only:
        # Left active until exit: restoring Triton's default driver raises on a machine without one.
        activate(arch)
    report = replay(
        manifest,
        allow=allow or [],
        parallel=parallel,  # type: ignore[arg-type]
        workers=workers,
        progress=not no_progress and not as_json,
        console=console,
    )
    if as_json:
        typer.echo(json.dumps(report.as_dict(), indent=2))
    else:
        typer.echo(report.summary())
        for r in report.results:
            if r.status in ("skipped", "failed"):
                typer.echo(f"  {r.status}: {r.kernel} {r.key[:80]}: {r.reason}")
    if report.failed:
        raise typer.Exit(1)


@app.command()
def coverage(
    journal_dir: Annotated[Path | None, typer.Option(help="Journal directory [default: JITWATCH_DIR].")] = None,
    allow: AllowOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the coverage report as JSON.")] = False,
    verbose: Annotated[bool, typer.Option("-v", "--verbose", help="Also list every argument's classes.")] = False,
) -> None:
    """Specialization coverage per kernel: classes Triton distinguishes, covered by warmup or not."""
    from rich.console import Console

    from jitwatch.coverage import coverage_for_journal, kernels_for_report, render_coverage
    from jitwatch.journal import Journal, JournalCorruptError

    jdir = journal_dir or _settings().journal_dir
    try:
        with Journal(jdir, readonly=True) as journal:
            report = coverage_for_journal(journal)
            if allow:
                report = coverage_for_journal(journal, kernels=kernels_for_report(report, allow))
    except (FileNotFoundError, JournalCorruptError) as exc:
        typer.echo(f"jitwatch: {exc}", err=True)
        raise typer.Exit(1) from None
    if as_json:
        typer.echo(json.dumps(report.model_dump(mode="json"), indent=2))
        return
    render_coverage(report, Console(), verbose=verbose)


if __name__ == "__main__":
    app()
