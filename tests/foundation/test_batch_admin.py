"""Operators see the Batch API's files and batches in the admin, and cannot change them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone

from tenants.models import Batch, StoredFile


@pytest.fixture
def staff_client(client, db):
    user = get_user_model().objects.create_superuser("op", "op@example.com", "pw-long-enough")
    client.force_login(user)
    return client


@pytest.fixture
def records(cast):
    stored = StoredFile.objects.create(
        tenant=cast.acme,
        api_key=cast.alice,
        user="alice",
        filename="in.jsonl",
        purpose="batch",
        bytes=10,
        storage_name="file-x",
    )
    batch = Batch.objects.create(
        id="batch_243535f359194528951f6e2d",  # '_24' is how the admin writes '$' in a path
        tenant=cast.acme,
        api_key=cast.alice,
        user="alice",
        endpoint="/v1/chat/completions",
        input_file_id=stored.pk,
        expires_at=timezone.now() + timedelta(hours=24),
    )
    return {StoredFile: stored, Batch: batch}


def url(model, view, *pks):
    """The admin's own address of a record: ids such as 'batch_24..' are quoted as the admin quotes them
    (it reads '_24' in a path as '$')."""
    args = [quote(pk) for pk in pks]
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


@pytest.mark.parametrize("model", [StoredFile, Batch], ids=lambda m: m.__name__)
def test_staff_see_the_list_and_each_record(staff_client, records, model):
    listed = staff_client.get(url(model, "changelist"))
    assert listed.status_code == 200 and records[model].pk in listed.content.decode()
    assert staff_client.get(url(model, "change", records[model].pk)).status_code == 200


@pytest.mark.parametrize("model", [StoredFile, Batch], ids=lambda m: m.__name__)
def test_nothing_can_be_added_changed_or_deleted(staff_client, records, model):
    assert staff_client.get(url(model, "add")).status_code == 403
    obj = records[model]
    staff_client.post(url(model, "change", obj.pk), {"user": "mallory"})
    assert type(obj).objects.get(pk=obj.pk).user == "alice"
    assert staff_client.post(url(model, "delete", obj.pk), {"post": "yes"}).status_code == 403
