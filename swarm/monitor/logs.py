"""A node's log file: node.log in its run folder, rotated, plain text or JSON lines.

`NodeLog` owns the file (a `RotatingFileHandler`: `monitor.log_max_mb`, `monitor.log_backups`)
and a logger of its own that `LogReporter` writes the node's events to: its start, each round
and evaluation (the same line the terminal shows), and every message (bans, refused deltas,
publish failures). With `monitor.log_format = "json"` each line is one JSON object with
`time`, `level`, `logger` and `message`, and a round or evaluation also carries its report's
fields under `data`.

`capture_process()` (what `swarm-node join` does: one node per process) also sends the
process's own logging there: libraries (py-libp2p, transformers, huggingface_hub, ...) at
WARNING and up, swarm's own modules at INFO and up, and Python warnings. Library noise then stays out of the
terminal, whose view is the reporter's alone; swarm's own warnings still reach stderr as
before. Several nodes in one process (tests, experiments) each keep their own node.log
without capturing the process.
"""

from __future__ import annotations

import dataclasses
import datetime
import importlib.util
import json
import logging
import logging.handlers
import sys
from pathlib import Path

from swarm.core.errors import ConfigError
from swarm.monitor.display import (
    EvalReport,
    Reporter,
    RoundReport,
    RunInfo,
    eval_line,
    header_lines,
    round_line,
)

LOG_FILE = "node.log"
# Libraries whose loggers do not reach the root logger: py-libp2p turns its propagation off
# when it is imported (unless LIBP2P_DEBUG is set). They are imported first (so that they
# are configured already) and get the file handler directly.
ISOLATED_LIBRARIES = ("libp2p",)
# Libraries that print to the terminal through a handler of their own (huggingface_hub: its
# download retries), with the module whose import adds it. While captured, that handler is
# removed: their records reach the file through the root logger.
CONSOLE_LIBRARIES = {"huggingface_hub": "huggingface_hub.file_download"}
TEXT_FORMAT = "%(asctime)s %(levelname)-7s %(name)s: %(message)s"
SWARM_LOGGER = "swarm"


class JsonLineFormatter(logging.Formatter):
    """One JSON object a line: time (ISO 8601, UTC), level, logger, message[, event, data]."""

    def format(self, record: logging.LogRecord) -> str:
        line = {
            "time": datetime.datetime.fromtimestamp(record.created, datetime.UTC).isoformat(
                timespec="milliseconds"
            ),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key in ("event", "data"):
            if hasattr(record, key):
                line[key] = getattr(record, key)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def make_formatter(fmt: str) -> logging.Formatter:
    """The formatter of `monitor.log_format`: "text" or "json"."""
    if fmt == "json":
        return JsonLineFormatter()
    if fmt == "text":
        return logging.Formatter(TEXT_FORMAT)
    raise ConfigError(f"monitor.log_format must be text or json, not {fmt!r}")


class NodeLog:
    """node.log in `run_dir`, and a logger of this node's own that writes only there."""

    def __init__(self, run_dir: Path, fmt: str = "text", max_mb: int = 10, backups: int = 5):
        self.path = Path(run_dir) / LOG_FILE
        try:
            self.handler = logging.handlers.RotatingFileHandler(
                self.path, maxBytes=max_mb * 1024 * 1024, backupCount=backups, encoding="utf-8"
            )
        except OSError as e:
            raise ConfigError(
                f"cannot write {self.path}: {e.strerror or e}: choose a writable node.run_dir"
            ) from None
        self.handler.setFormatter(make_formatter(fmt))
        self.logger = logging.Logger(f"{SWARM_LOGGER}.node", logging.INFO)  # not in the global tree
        self.logger.addHandler(self.handler)
        self._undo: list = []

    @classmethod
    def for_config(cls, config) -> NodeLog:
        """The node.log a config asks for (its run folder must exist)."""
        m = config.monitor
        return cls(config.run_dir, m.log_format, m.log_max_mb, m.log_backups)

    def capture_process(self, transformers: bool = True) -> None:
        """Send the whole process's logging here too (one node per process: `join`).

        Libraries log at WARNING and up, swarm's modules at INFO and up; swarm's own
        warnings also still go to stderr; Python warnings are logged, not printed."""
        root = logging.getLogger()
        swarm = logging.getLogger(SWARM_LOGGER)
        stderr = logging.StreamHandler(sys.stderr)
        stderr.setLevel(logging.WARNING)
        stderr.setFormatter(logging.Formatter("%(levelname)s: %(message)s"))
        previous = (root.level, swarm.level)
        root.addHandler(self.handler)
        root.setLevel(logging.WARNING)
        swarm.setLevel(logging.INFO)
        swarm.addHandler(stderr)
        logging.captureWarnings(True)

        def undo() -> None:
            root.removeHandler(self.handler)
            swarm.removeHandler(stderr)
            root.setLevel(previous[0])
            swarm.setLevel(previous[1])
            logging.captureWarnings(False)

        self._undo.append(undo)
        for name in ISOLATED_LIBRARIES:
            self._capture_isolated(name)
        for name, module in CONSOLE_LIBRARIES.items():
            self._silence_console(name, module)
        if transformers and importlib.util.find_spec("transformers") is not None:
            from transformers.utils import logging as hf_logging

            hf_logging.set_verbosity_warning()
            hf_logging.disable_default_handler()  # its stderr handler: noise on the terminal
            hf_logging.enable_propagation()  # to the root logger, hence the file

            def undo_transformers() -> None:
                hf_logging.disable_propagation()
                hf_logging.enable_default_handler()

            self._undo.append(undo_transformers)

    def _capture_isolated(self, name: str) -> None:
        if importlib.util.find_spec(name) is None:
            return
        importlib.import_module(name)  # it configures its logging on import: let it first
        logger = logging.getLogger(name)
        if logger.propagate:
            return  # reaches the root logger's handler anyway
        previous = logger.level
        logger.setLevel(logging.WARNING)
        logger.addHandler(self.handler)

        def undo() -> None:
            logger.removeHandler(self.handler)
            logger.setLevel(previous)

        self._undo.append(undo)

    def _silence_console(self, name: str, module: str) -> None:
        """Take a library's own terminal handlers off its logger (put back by `close`)."""
        if importlib.util.find_spec(name) is None:
            return
        importlib.import_module(module)  # it adds its handler on import: let it first
        logger = logging.getLogger(name)
        console = [
            h
            for h in logger.handlers
            if isinstance(h, logging.StreamHandler) and not isinstance(h, logging.FileHandler)
        ]
        for handler in console:
            logger.removeHandler(handler)

        def undo() -> None:
            for handler in console:
                logger.addHandler(handler)

        self._undo.append(undo)

    def close(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()
        self.logger.removeHandler(self.handler)
        self.handler.close()


class LogReporter(Reporter):
    """The node's events, as lines of its node.log."""

    def __init__(self, log: NodeLog):
        self.logger = log.logger

    def start(self, info: RunInfo) -> None:
        for line in header_lines(info):
            self.logger.info(line, extra={"event": "start"})

    def round(self, report: RoundReport) -> None:
        data = dataclasses.asdict(report)
        self.logger.info(round_line(report), extra={"event": "round", "data": data})

    def evaluation(self, report: EvalReport) -> None:
        data = dataclasses.asdict(report)
        self.logger.info(eval_line(report), extra={"event": "evaluation", "data": data})

    def message(self, text: str) -> None:
        self.logger.info(text, extra={"event": "message"})

    def stop(self) -> None:
        self.logger.info("stopped", extra={"event": "stop"})
