"""Operator changes reach the running gateways: any save or delete of their config marks this
process's gateway dirty and, with several processes sharing REDIS_URL, tells the others once the
transaction commits (`llmserver.runtime.notices`). The same changes are recorded in the audit
trail by `tenants.audit`, connected here."""

from __future__ import annotations

import sys
from typing import Any

from django.db import transaction
from django.db.models.signals import post_delete, post_save
from django.dispatch import receiver

from llmserver.conf import gateway_settings
from llmserver.runtime import notices
from tenants import audit
from tenants.models.config_changes import CONFIG_MODELS

audit.connect()


@receiver(post_save)
@receiver(post_delete)
def config_changed(sender: type, **kwargs: Any) -> None:
    if sender not in CONFIG_MODELS:
        return
    # No running gateway in this process unless its module was loaded (the admin-only case).
    module = sys.modules.get("llmserver.process")
    gateway = module.current_gateway() if module is not None else None
    if gateway is not None:
        gateway.mark_dirty()
    conf = gateway_settings()
    if conf.redis_url:
        transaction.on_commit(lambda: notices.publish(conf.redis_url, conf.cluster_prefix))
