"""Recording the audit trail (`AuditEntry`): who changed the configuration, when, from where,
what, and the changed fields before and after.

What is recorded: every save and delete of the configuration (`CONFIG_MODELS`: tenants, tiers,
keys, backends, routes, prices, quota rules, the fair-share policy and its per-model weights)
and of who may change it (users, groups, tenant memberships, and their group and permission
assignments, through `m2m_changed`). A `pre_save` reads the old row (one primary-key query), `post_save` compares it
with what was saved and inserts one row, in the same transaction as the change, so a change that
rolls back leaves no entry; a save that changed nothing, or only use (`ApiKey.last_used_at`, a
user's `last_login`), leaves none either. Secrets (a key's hash, a backend's upstream key, a
password) are recorded only as `[redacted]`.

Who did it, and from where, is `tenants.audit_actor.current_actor()`: the current request's
admin user or API key, the management command, or `system`. `QuerySet.update()` and raw SQL send no signals and are not recorded (the configuration change
counter of `tenants/models/config_changes.py` still sees them). None of this runs on the
completion path: the gateway's consumers never save configuration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.exceptions import ObjectDoesNotExist, ValidationError
from django.db import models
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_save

from tenants.audit_actor import current_actor, name_commands
from tenants.models.audit import AuditAction, AuditEntry
from tenants.models.backends import Backend
from tenants.models.config_changes import CONFIG_MODELS
from tenants.models.keys import ApiKey
from tenants.models.members import Membership
from tenants.models.tenants import Tenant

REDACTED = "[redacted]"
_BEFORE = "_audit_before"
_UNAUDITED = object()  # a save of use-only fields (`update_fields`): nothing to read or record


@dataclass(frozen=True)
class Audited:
    """How a model is recorded: fields that are use, not configuration, and secret fields."""

    skip: frozenset[str] = frozenset()
    secret: frozenset[str] = frozenset()


def audited_models() -> dict[type[models.Model], Audited]:
    recorded: dict[type[models.Model], Audited] = {model: Audited() for model in CONFIG_MODELS}
    recorded[ApiKey] = Audited(skip=frozenset({"last_used_at"}), secret=frozenset({"hashed"}))
    recorded[Backend] = Audited(secret=frozenset({"api_key"}))
    recorded[get_user_model()] = Audited(
        skip=frozenset({"last_login"}), secret=frozenset({"password"})
    )
    recorded[Group] = Audited()
    recorded[Membership] = Audited()
    return recorded


# ---- what changed -------------------------------------------------------------------------


def _fields(model: type[models.Model], audited: Audited) -> list[models.Field[Any, Any]]:
    return [
        f for f in model._meta.concrete_fields if not f.primary_key and f.name not in audited.skip
    ]


def _comparable(field: models.Field[Any, Any], value: Any) -> Any:
    try:
        return field.to_python(value)
    except ValidationError:
        return value


def _shown(field: models.Field[Any, Any], obj: models.Model, audited: Audited) -> Any:
    """A field's value as the entry records it: secrets redacted, a relation by name and id."""
    value = getattr(obj, field.attname)
    if field.name in audited.secret:
        return REDACTED if value else value
    if field.is_relation and value is not None:
        try:
            return f"{getattr(obj, field.name)} (#{value})"
        except ObjectDoesNotExist:
            return f"#{value}"
    return value


def _tenant_of(instance: models.Model) -> int | None:
    if isinstance(instance, Tenant):
        return instance.pk
    tenant_id = getattr(instance, "tenant_id", None)
    return tenant_id if isinstance(tenant_id, int) else None


def record(
    instance: models.Model, action: AuditAction, changes: dict[str, Any], using: str
) -> AuditEntry:
    """Insert one entry about `instance`, naming the current actor."""
    actor = current_actor()
    return AuditEntry.objects.using(using).create(
        actor_kind=actor.kind,
        actor=actor.name[:200],
        address=actor.address,
        model=instance._meta.label_lower,
        object_id=str(instance.pk),
        object_repr=str(instance)[:200],
        action=action,
        changes=changes,
        tenant_id=_tenant_of(instance),
    )


def _before_save(
    sender: type[models.Model],
    instance: models.Model,
    using: str,
    update_fields: frozenset[str] | None = None,
    **kwargs: Any,
) -> None:
    audited = RECORDED[sender]
    fields = _fields(sender, audited)
    if update_fields is not None and not {f.name for f in fields} & set(update_fields):
        instance.__dict__[_BEFORE] = _UNAUDITED
        return
    old = None
    if instance.pk is not None:
        # The FKs joined, so the entry can name the old tier or tenant with no further query.
        related = [f.name for f in fields if f.is_relation]
        rows = sender._base_manager.using(using).select_related(*related)
        old = rows.filter(pk=instance.pk).first()
    instance.__dict__[_BEFORE] = old


def _after_save(
    sender: type[models.Model], instance: models.Model, created: bool, using: str, **kwargs: Any
) -> None:
    old = instance.__dict__.pop(_BEFORE, None)
    if old is _UNAUDITED:
        return
    audited = RECORDED[sender]
    fields = _fields(sender, audited)
    if created or old is None:
        changes = {f.name: [None, _shown(f, instance, audited)] for f in fields}
        record(instance, AuditAction.CREATE, changes, using)
        return
    changes = {
        f.name: [_shown(f, old, audited), _shown(f, instance, audited)]
        for f in fields
        if _comparable(f, getattr(old, f.attname)) != _comparable(f, getattr(instance, f.attname))
    }
    if changes:
        record(instance, AuditAction.UPDATE, changes, using)


def _after_delete(
    sender: type[models.Model], instance: models.Model, using: str, **kwargs: Any
) -> None:
    audited = RECORDED[sender]
    changes = {f.name: [_shown(f, instance, audited), None] for f in _fields(sender, audited)}
    record(instance, AuditAction.DELETE, changes, using)


# ---- group and permission assignments -----------------------------------------------------


def _member(obj: models.Model) -> str:
    if isinstance(obj, Permission):
        return f"{obj.content_type.app_label}.{obj.codename}"
    return str(obj)


def _members(instance: models.Model, accessor: str) -> list[str]:
    related = getattr(instance, accessor).all()
    if related.model is Permission:
        related = related.select_related("content_type")
    return sorted(_member(obj) for obj in related)


def _assignments() -> dict[type[models.Model], tuple[str, str]]:
    """Each recorded many-to-many table: the accessor on its owner and on the other side."""
    user: type[models.Model] = get_user_model()
    owners: list[tuple[type[models.Model], str]] = [
        (user, "groups"),
        (user, "user_permissions"),
        (Group, "permissions"),
    ]
    tables: dict[type[models.Model], tuple[str, str]] = {}
    for model, name in owners:
        field = model._meta.get_field(name)
        assert isinstance(field, models.ManyToManyField)
        through: type[models.Model] = field.remote_field.through  # type: ignore[assignment]
        tables[through] = (name, field.remote_field.get_accessor_name() or "")
    return tables


def _assignment_changed(
    sender: type[models.Model],
    instance: models.Model,
    action: str,
    reverse: bool,
    using: str,
    **kwargs: Any,
) -> None:
    forward, backward = ASSIGNMENTS[sender]
    accessor = backward if reverse else forward
    stash = f"_audit_{accessor}"
    if action in ("pre_add", "pre_remove", "pre_clear"):
        instance.__dict__[stash] = _members(instance, accessor)
    elif action in ("post_add", "post_remove", "post_clear"):
        before = instance.__dict__.pop(stash, None)
        after = _members(instance, accessor)
        if before is not None and before != after:
            record(instance, AuditAction.UPDATE, {accessor: [before, after]}, using)


RECORDED: dict[type[models.Model], Audited] = {}
ASSIGNMENTS: dict[type[models.Model], tuple[str, str]] = {}


def connect() -> None:
    """Connect the receivers (once; called when the apps are ready)."""
    RECORDED.update(audited_models())
    ASSIGNMENTS.update(_assignments())
    for model in RECORDED:
        uid = f"audit:{model._meta.label_lower}"
        pre_save.connect(_before_save, sender=model, dispatch_uid=uid)
        post_save.connect(_after_save, sender=model, dispatch_uid=uid)
        post_delete.connect(_after_delete, sender=model, dispatch_uid=uid)
    for through in ASSIGNMENTS:
        m2m_changed.connect(
            _assignment_changed, sender=through, dispatch_uid=f"audit:{through._meta.label_lower}"
        )
    name_commands()
