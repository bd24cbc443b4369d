"""The operator's configuration, kept current: loaded at start, reloaded when this process's
admin saves (signals call `mark_dirty`), when another process says so over Redis, or when the
database's change counter moved (any process or tool; read every WATCH_INTERVAL,
`tenants.models.config_changes`)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from llmserver.conf import GatewaySettings
from llmserver.runtime.config import GatewayConfig, load_gateway_config
from llmserver.runtime.db import run_db
from tenants.models import config_changes

log = logging.getLogger(__name__)
# How often the change counter is read, so that a change made by another process (a key revoked
# from the command line, another gateway's admin) takes effect within about this long; one
# primary-key read when nothing changed.
WATCH_INTERVAL = 0.5


class ConfigWatch:
    """Holds the configuration in force; `apply` is told each new one, `changed` each change
    (the key cache is dropped with it)."""

    def __init__(
        self,
        settings: GatewaySettings,
        apply: Callable[[GatewayConfig], None],
        changed: Callable[[], None],
    ) -> None:
        self.settings = settings
        self.config: GatewayConfig | None = None
        self._apply = apply
        self._changed = changed
        self._dirty = asyncio.Event()
        # One reload at a time: a slow load begun before a change must not apply after a
        # later load that saw it (the older configuration would win).
        self._reloading = asyncio.Lock()
        self._count = 0  # the database's change count the configuration reflects
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        """The configuration and the change count it reflects, read again while the count moved
        during the load (the first load of a fresh database creates the fair-share policy; or
        another process wrote): so a start is not followed by a needless reload."""
        self._loop = asyncio.get_running_loop()
        for _ in range(3):
            before = await run_db(config_changes)
            config = await run_db(load_gateway_config, self.settings)
            if await run_db(config_changes) == before:
                break
        self._count = before  # still moving: the watch reloads once more
        self._set(config)

    def mark_dirty(self) -> None:
        """Called from any thread (admin saves run in worker threads)."""
        self._changed()
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._dirty.set)

    async def reload_once(self) -> None:
        async with self._reloading:
            self._set(await run_db(load_gateway_config, self.settings))

    def _set(self, config: GatewayConfig) -> None:
        self._apply(config)
        self.config = config

    async def watch_once(self) -> bool:
        """Reload if the database's change counter moved since the last look. Whether it had."""
        count = await run_db(config_changes)
        if count == self._count:
            return False
        self._count = count
        self.mark_dirty()
        return True

    async def run_reloads(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                await self.reload_once()
            except Exception:
                log.exception("reloading the gateway configuration failed; keeping the old one")

    async def run_watch(self) -> None:
        while True:
            await asyncio.sleep(WATCH_INTERVAL)
            try:
                await self.watch_once()
            except Exception:
                log.exception("reading the configuration change counter failed; will retry")
