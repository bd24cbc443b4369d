"""A batch's output, written as its lines are answered: the files are the record of progress.

Answered lines go to `output.jsonl` (a 2xx answer) or `errors.jsonl` (anything else), one JSON
line each, appended by one writer task. After a restart `recover()` reads both files back: a
torn last line is cut off, and every custom_id found there is done and never sent again; the
counts are recomputed from them, so the database's counts are only a report of these. A line
that was being answered when the process stopped is not in either file, and is sent again.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmserver.batches.claims import Output, Progress
from llmserver.batches.storage import FileStore

log = logging.getLogger(__name__)
OUTPUT, ERRORS = "output.jsonl", "errors.jsonl"
TAIL_BLOCK = 64 * 1024


@dataclass(frozen=True, slots=True)
class LineResult:
    """One answered line: its record in OpenAI's batch output shape, whether it goes to the
    output file (`ok`), and the tokens it used."""

    custom_id: str
    ok: bool
    record: dict[str, Any]
    input_tokens: int = 0
    output_tokens: int = 0


def usage_tokens(record: dict[str, Any]) -> tuple[int, int]:
    """Prompt and completion tokens of an output record's body (OpenAI's names, or the
    Responses API's)."""
    response = record.get("response") or {}
    body = response.get("body") if isinstance(response, dict) else None
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return 0, 0
    prompt = usage.get("prompt_tokens", usage.get("input_tokens", 0))
    completion = usage.get("completion_tokens", usage.get("output_tokens", 0))
    return (
        prompt if isinstance(prompt, int) else 0,
        completion if isinstance(completion, int) else 0,
    )


class ResultFiles:
    def __init__(self, store: FileStore, batch_id: str) -> None:
        self.store = store
        self.names = {
            True: store.batch_part(batch_id, OUTPUT),
            False: store.batch_part(batch_id, ERRORS),
        }
        self.done: set[str] = set()
        self.completed = self.failed = self.input_tokens = self.output_tokens = 0
        self._queue: asyncio.Queue[LineResult] = asyncio.Queue()
        self.broken = False  # a write failed (a full disk): the run should stop and resume

    def progress(self) -> Progress:
        return Progress(self.completed, self.failed, self.input_tokens, self.output_tokens)

    # recovery -----------------------------------------------------------------------------

    def recover(self) -> None:
        """Runs in a worker thread, before any line is sent."""
        for ok, name in self.names.items():
            path = self.store.path(name)
            _cut_torn_tail(path)
            for record in _records(path):
                custom_id = record.get("custom_id")
                if isinstance(custom_id, str):
                    self.done.add(custom_id)
                self._count(ok, *usage_tokens(record))

    def _count(self, ok: bool, input_tokens: int, output_tokens: int) -> None:
        if ok:
            self.completed += 1
        else:
            self.failed += 1
        self.input_tokens += input_tokens
        self.output_tokens += output_tokens

    # writing ------------------------------------------------------------------------------

    def put(self, result: LineResult) -> None:
        """Hand a result to the writer; never waits, so a line cannot be cut off between its
        answer and its record."""
        self._queue.put_nowait(result)

    async def drain(self) -> None:
        """Every result handed over so far is in its file."""
        await self._queue.join()

    async def run(self) -> None:
        """The writer: whatever has arrived, in one trip to a worker thread."""
        while True:
            results = [await self._queue.get()]
            while not self._queue.empty():
                results.append(self._queue.get_nowait())
            try:
                await asyncio.to_thread(self._append, results)
            except Exception:
                # Not recorded, so not done: these lines are sent again when the batch resumes.
                log.exception("batch results could not be written to %s", self.names[True])
                self.broken = True
            finally:
                for _ in results:
                    self._queue.task_done()

    def _append(self, results: list[LineResult]) -> None:
        for ok in (True, False):
            lines = [json.dumps(r.record) + "\n" for r in results if r.ok is ok]
            if lines:
                path = self.store.path(self.names[ok])
                path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
                with open(path, "a", encoding="utf-8") as f:
                    f.write("".join(lines))
        for r in results:
            self.done.add(r.custom_id)
            self._count(r.ok, r.input_tokens, r.output_tokens)

    def outputs(self) -> tuple[Output, ...]:
        """Runs in a worker thread: both files, forced to disk, as the batch's output files."""
        found = []
        for ok, name in self.names.items():
            path = self.store.path(name)
            if path.exists():
                with open(path, "rb") as f:
                    os.fsync(f.fileno())
            field = "output_file_id" if ok else "error_file_id"
            found.append(Output(field, name, self.store.size(name)))
        return tuple(found)


def _cut_torn_tail(path: Path) -> None:
    """A process that died mid-write may leave half a line: cut it, the line is sent again.
    Read back from the end a block at a time, so a large file is not read whole."""
    if not path.exists():
        return
    with open(path, "rb+") as f:
        end = f.seek(0, os.SEEK_END)
        keep = 0
        while end > 0:
            start = max(0, end - TAIL_BLOCK)
            f.seek(start)
            newline = f.read(end - start).rfind(b"\n")
            if newline >= 0:
                keep = start + newline + 1
                break
            end = start
        f.truncate(keep)


def _records(path: Path) -> Iterator[dict[str, Any]]:
    if not path.exists():
        return
    with open(path, "rb") as f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                yield record
