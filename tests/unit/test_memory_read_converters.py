"""Read converters return validated queries: bad shape is refused before any use case runs."""

from __future__ import annotations

import pytest

from memory_service.api import requests as convert
from ration.memory.v1 import memory_pb2
from ration.memory.v1 import memory_service_pb2 as pb
from servicekit.errors import BadRequestDetail, DomainError

BAD = [
    (convert.capacity_query, pb.GetCapacityRequest(memory_ref="m", revision=0), "revision"),
    (convert.revisions_query, pb.ListRevisionsRequest(memory_ref="m", since=-1), "since"),
    (convert.changes_query, pb.GetChangesRequest(memory_ref="m", page_token="x"), "page_token"),
    (convert.citation_query, pb.ValidateCitationRequest(memory_ref="m", revision=1), "entry_id"),
    (convert.list_query, pb.ListMemoryRequest(memory_ref="m", limit=-1), "limit"),
    (
        convert.search_query,
        pb.SearchMemoryRequest(memory_ref="m", mode=memory_pb2.SEARCH_MODE_FILTER, limit=101),
        "limit",
    ),
]


@pytest.mark.parametrize(("converter", "request_", "field"), BAD)
def test_a_read_converter_refuses_bad_shape_naming_the_field(
    converter: object, request_: object, field: str
) -> None:
    with pytest.raises(DomainError) as refused:
        converter(request_)  # type: ignore[operator]
    assert refused.value.reason == "VALIDATION_FAILED"
    detail = refused.value.detail
    assert isinstance(detail, BadRequestDetail)
    assert field in [v.field for v in detail.violations]


def test_a_well_formed_read_converts_to_its_query() -> None:
    query = convert.capacity_query(pb.GetCapacityRequest(memory_ref="m", revision=2))
    assert (query.memory_ref, query.revision) == ("m", 2)
