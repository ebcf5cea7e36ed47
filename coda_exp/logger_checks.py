"""The checks of a run's loggers (``cfg.logger``) before any data loads, and W&B's own errors as a run starts its W&B
run, each as one message (a :class:`~coda_exp.errors.UserError`: exit status 2, no traceback).

- **Keys** (:func:`logger_key_problems`): a key under ``logger.<name>`` that the logger's class does not take, nor
  the function it passes the keys it does not know on to (:data:`PASSED_ON`: W&B's ``wandb.init``, TensorBoard's
  ``SummaryWriter``), is one message naming it, the key spelled almost alike and the keys it takes:
  ``+logger.wandb.projet=x`` (did you mean ``logger.wandb.project``?) or ``+logger.csv.flush_every=5`` used to fail
  once the data had loaded, in ``wandb.init`` or Hydra's instantiation, in two tracebacks. The trainer's keys are
  checked on a throwaway Trainer (``run_checks.check_trainer``); ``config_keys`` leaves these sections to such checks.
- **W&B's mode** (:func:`wandb_mode`): ``logger.wandb.mode`` where set; ``logger.wandb.offline=false`` goes online
  whatever ``WANDB_MODE`` says (a line says so where it says otherwise); the default, ``offline: true``, yields to
  ``WANDB_MODE`` where it is set (``WANDB_MODE=online`` goes online, as wandb's own hint says: it used to be
  overridden in silence), else offline. A ``WANDB_MODE`` wandb does not take is one message.
- **Online W&B** (:func:`check_wandb_online`): ``logger=wandb logger.wandb.offline=false`` needs an API key
  (``wandb login``, ``WANDB_API_KEY``) and the W&B server (``WANDB_BASE_URL``, else wandb's own) reachable. Without
  a key, or where the server does not answer a TCP connection within :data:`CONNECT_TIMEOUT_S` (through the
  proxy of ``https_proxy`` where one is set), the run is refused before its data loads, naming ``wandb login`` or
  ``logger.wandb.offline=true``: it used to fail once the data had loaded, in two tracebacks, after about 90 s
  (wandb's own init timeout) without a network.
- **During the run** (:func:`wandb_errors`): an error wandb raises as the run's W&B run starts (a key the server
  refuses, a project one may not write to, a network that went away) is one :class:`LoggerError`.

``run_checks.check_loggers`` calls :func:`check_logger_settings` after the extras' check (the package installed),
the keys first.
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import os
import socket
import threading
import urllib.request
from urllib.parse import urlsplit

from omegaconf import DictConfig

from coda_exp.config_checks import ConfigError
from coda_exp.errors import UserError
from coda_exp.node_keys import parameters

#: a logger class (the end of its ``_target_``) -> where it passes the keys it does not take itself
PASSED_ON = {"WandbLogger": "wandb.init", "TensorBoardLogger": "torch.utils.tensorboard.SummaryWriter"}
WANDB_MODES = ("online", "offline", "shared", "disabled", "dryrun", "run")
ONLINE_MODES = ("online", "run", "shared")  # wandb's modes that talk to a server (offline: offline, dryrun)
CONNECT_TIMEOUT_S = 5.0  # how long the W&B server may take to accept a connection
DEFAULT_BASE_URL = "https://api.wandb.ai"  # where wandb's own settings cannot be read
SYNC = "(and upload later with `wandb sync <run folder>/wandb`)"
OFFLINE_HINT = f"or log offline (logger.wandb.offline=true, WANDB_MODE unset or offline) {SYNC}"


class LoggerError(UserError, RuntimeError):
    """A logger that cannot log as configured, found once the run started (W&B's own error, said in one line)."""


def _taken(target: str) -> tuple[dict[str, inspect.Parameter], str | None, bool]:
    """The keyword parameters a logger class ``target`` takes, with those of the function it passes other keys on
    to (:data:`PASSED_ON`, named second); third, whether any keyword goes (a class of your own with ``**kwargs``)."""
    taken, any_keyword = parameters(target)
    through = PASSED_ON.get(target.rsplit(".", 1)[-1]) if any_keyword else None
    if through is not None:
        more, any_keyword = parameters(through)
        taken = {**taken, **more}
    named = {k: p for k, p in taken.items() if k != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)}
    return named, through, any_keyword


def logger_key_problems(cfg: DictConfig) -> list[str]:
    """Each key of a ``logger.<name>`` node its class does not take (module docstring), with the key spelled almost
    alike and the keys it takes; a logger whose class or function does not import is left to its own error."""
    problems = []
    for name, node in (cfg.get("logger") or {}).items():
        if not isinstance(node, DictConfig) or "_target_" not in node:
            continue
        target = str(node._target_)
        try:
            taken, through, any_keyword = _taken(target)
        except (ImportError, AttributeError, TypeError, ValueError):
            continue
        unknown = [str(k) for k in node if not str(k).startswith("_") and str(k) not in taken]
        if any_keyword or not unknown:
            continue
        accepted = sorted(taken)
        where = f"{target}{f' nor of {through}, which it passes keys on to' if through else ''}"
        for key in unknown:
            close = difflib.get_close_matches(key, accepted, n=1, cutoff=0.6)
            hint = f"; did you mean logger.{name}.{close[0]}?" if close else ""
            problems.append(f"logger.{name}.{key} is not a parameter of {where}{hint} (logger.{name} takes: "
                            f"{', '.join(accepted)})")
    return problems


def is_wandb(logger_cfg) -> bool:
    """Whether a ``logger.<name>`` node is a W&B logger (its ``_target_``)."""
    return str(logger_cfg.get("_target_", "")).endswith("WandbLogger")


def wandb_nodes(cfg: DictConfig) -> dict[str, DictConfig]:
    """The W&B loggers of ``cfg.logger`` by their keys (``logger.wandb``)."""
    return {f"logger.{name}": node for name, node in (cfg.get("logger") or {}).items()
            if node is not None and is_wandb(node)}


def wandb_modes() -> tuple[str, ...]:
    """The values wandb takes for its mode (its ``Settings.mode``), else those of wandb 0.31."""
    try:
        import typing

        import wandb

        modes = typing.get_args(wandb.Settings.model_fields["mode"].annotation)
        return tuple(str(m) for m in modes) or WANDB_MODES
    except Exception:  # noqa: BLE001 - another wandb version
        return WANDB_MODES


def environment_mode() -> str | None:
    """``WANDB_MODE`` where it is set (None where not, or empty); a value wandb does not take is a ConfigError."""
    value = os.environ.get("WANDB_MODE", "").strip()
    if not value:
        return None
    if value not in (modes := wandb_modes()):
        raise ConfigError(f"WANDB_MODE={value!r} is not a W&B mode ({', '.join(modes)}): set one of them, or unset "
                          "it and choose with logger.wandb.offline=true|false")
    return value


def wandb_mode(node: DictConfig) -> str:
    """The ``mode`` a W&B logger's ``wandb.init`` gets (the rule of docs/running.md): ``logger.wandb.mode`` where
    set; ``online`` for ``logger.wandb.offline=false``; else (``offline: true``, the default) ``WANDB_MODE`` where it
    is set (``WANDB_MODE=online`` goes online, as wandb's own hint says; ``disabled`` logs nothing), else
    ``offline``. A ``WANDB_MODE`` wandb does not take is a ConfigError."""
    env = environment_mode()
    if node.get("mode") is not None:
        return str(node.mode)
    if not node.get("offline", False):
        return "online"
    return env or "offline"


def mode_setting(node: DictConfig) -> str:
    """The setting that chose a W&B logger's mode by :func:`wandb_mode`'s rule, as typed (``WANDB_MODE=online``)."""
    if node.get("mode") is not None:
        return f"logger.wandb.mode={node.mode}"
    if not node.get("offline", False):
        return "logger.wandb.offline=false"
    env = environment_mode()
    return f"WANDB_MODE={env}" if env else "logger.wandb.offline=true"


def offline_hint(node: DictConfig) -> str:
    """How to log offline instead, by the setting that chose online (:func:`mode_setting`)."""
    setting = mode_setting(node).split("=")[0]
    how = {"logger.wandb.mode": "logger.wandb.mode=offline",
           "WANDB_MODE": "WANDB_MODE=offline (or unset it)"}.get(setting, "logger.wandb.offline=true")
    return f"or log offline with {how} {SYNC}"


def mode_note(node: DictConfig, mode: str) -> str | None:
    """The line that says ``WANDB_MODE`` is set but not followed (the config chose ``mode``), else None."""
    env = environment_mode()
    if env is None or env == mode or {env, mode} <= {"offline", "dryrun"} or {env, mode} <= set(ONLINE_MODES):
        return None
    chosen = mode_setting(node)
    return (f"W&B mode {mode}: {chosen} wins over WANDB_MODE={env} (leave {chosen.split('=')[0]} at its default "
            "to follow WANDB_MODE)")


def base_url() -> str:
    """The W&B server online runs log to: ``WANDB_BASE_URL``, else wandb's settings (``wandb login --host``)."""
    if os.environ.get("WANDB_BASE_URL"):
        return os.environ["WANDB_BASE_URL"]
    try:
        from wandb.sdk import wandb_setup

        return str(wandb_setup.singleton().settings.base_url or DEFAULT_BASE_URL)
    except Exception:  # noqa: BLE001 - another wandb version: its default server
        return DEFAULT_BASE_URL


def has_credentials(url: str) -> bool:
    """Whether wandb finds credentials for ``url`` without asking (``WANDB_API_KEY``, an identity token file, the
    ``.netrc`` entry ``wandb login`` writes, its settings); a key of the wrong form is a ConfigError."""
    try:
        from wandb.errors import AuthenticationError
        from wandb.sdk.lib.wbauth import authenticate_session
    except ImportError:  # another wandb version: the variable, or the .netrc entry
        import netrc

        if os.environ.get("WANDB_API_KEY"):
            return True
        try:
            return netrc.netrc(os.environ.get("NETRC")).authenticators(urlsplit(url).hostname or "") is not None
        except (OSError, netrc.NetrcParseError):
            return False
    try:
        return authenticate_session(host=url, source="coda-exp", prompt=False, update_session=False) is not None
    except AuthenticationError as err:
        raise ConfigError(f"logger.wandb: online W&B: {err}: set a valid key (`wandb login --relogin`), "
                          f"{OFFLINE_HINT}") from None


def connect_problem(url: str, timeout: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why a TCP connection to ``url``'s host (or to the proxy ``urllib`` would use for it) fails within ``timeout``
    seconds, name resolution included; None where it is accepted."""
    parts = urlsplit(url)
    host, port, via = parts.hostname or "", parts.port or (443 if parts.scheme == "https" else 80), ""
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and not urllib.request.proxy_bypass(host):
        through = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host, port, via = through.hostname or "", through.port or 80, f" through the proxy {proxy}"
    outcome: dict[str, object] = {}

    def connect() -> None:  # in a thread: name resolution has no timeout of its own
        try:
            socket.create_connection((host, port), timeout=timeout).close()
            outcome["ok"] = True
        except OSError as err:
            outcome["error"] = err

    worker = threading.Thread(target=connect, name="wandb-reachable", daemon=True)
    worker.start()
    worker.join(timeout)
    if outcome.get("ok"):
        return None
    error = outcome.get("error")
    return f"{via.strip() + ': ' if via else ''}{error or f'no answer within {timeout:g} s'}"


def check_wandb_online(cfg: DictConfig) -> None:
    """An online W&B logger's API key and server, before any data loads (module docstring); nothing for an
    offline or disabled one."""
    for key, node in wandb_nodes(cfg).items():
        mode = wandb_mode(node)
        if mode not in ONLINE_MODES:
            continue
        url, online = base_url(), f"{key}: online W&B ({mode_setting(node)})"
        if not has_credentials(url):
            raise ConfigError(f"{online} needs an API key for {url} and none is configured: log in with "
                              f"`wandb login` (or set WANDB_API_KEY), {offline_hint(node)}")
        problem = connect_problem(url)
        if problem is not None:
            raise ConfigError(f"{online} cannot reach {url} ({problem}): check the network (WANDB_BASE_URL names "
                              f"another W&B server), {offline_hint(node)}")


def check_logger_settings(cfg: DictConfig) -> None:
    """Every check of this module on ``cfg.logger`` (module docstring), before any data loads."""
    problems = logger_key_problems(cfg)
    if wandb_nodes(cfg):
        environment_mode()  # a WANDB_MODE wandb does not take
    if problems:
        raise ConfigError(problems[0] if len(problems) == 1 else "\n  ".join(
            ["logger keys their classes do not take (fix the overrides or the YAML):", *problems]))
    check_wandb_online(cfg)


def _from_wandb(err: BaseException) -> bool:
    return type(err).__module__.split(".")[0] == "wandb"


@contextlib.contextmanager
def wandb_errors():
    """Around what starts a W&B run (``wandb.init``, through the first use of the logger's ``experiment``): an
    error wandb raises there (``UsageError``, ``CommError``, ``AuthenticationError``...) as one LoggerError
    naming what to do, where it was two tracebacks and exit status 1."""
    try:
        yield
    except Exception as err:
        if not _from_wandb(err):
            raise
        message = " ".join(str(err).split()) or type(err).__name__
        raise LoggerError(f"logger.wandb: W&B could not start the run's W&B run ({type(err).__name__}: {message}): "
                          f"log in with `wandb login`, check the network, {OFFLINE_HINT}") from err
