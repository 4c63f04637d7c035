"""Server reflection on every treespec gRPC server, as grpcurl uses it: a client that has none of the
protos lists the services, reads their methods and messages, and calls one with messages built from
what the server described."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from google.protobuf import descriptor_pool, message_factory
from google.protobuf.descriptor import ServiceDescriptor
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import ProtoReflectionDescriptorDatabase

from tests.services.recording_drafter import RecordingDrafter
from treespec.drafter.server.app import DrafterServer
from treespec.v1 import drafter_pb2, verifier_pb2

HEALTH = "grpc.health.v1.Health"
REFLECTION = "grpc.reflection.v1alpha.ServerReflection"


@pytest.fixture()
def drafter_address() -> Iterator[str]:
    server = DrafterServer(RecordingDrafter(97), "random")
    port = server.start()
    try:
        yield f"127.0.0.1:{port}"
    finally:
        server.stop(0)


Description = tuple[list[str], ServiceDescriptor, descriptor_pool.DescriptorPool]


def described(address: str, service: str) -> Description:
    """What the server at `address` says it serves, and its description of `service` (with the file
    that defines it and its messages, and those it imports, all fetched from the server)."""
    with grpc.insecure_channel(address) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        pool = descriptor_pool.DescriptorPool(database)
        services = sorted(database.get_services())
        return services, pool.FindServiceByName(service), pool


def methods(service: ServiceDescriptor) -> dict[str, tuple[str, str, bool, bool]]:
    return {
        m.name: (m.input_type.full_name, m.output_type.full_name, m.client_streaming, m.server_streaming)
        for m in service.methods
    }


def test_the_drafter_describes_its_service(drafter_address: str) -> None:
    ours = drafter_pb2.DESCRIPTOR.services_by_name["Drafter"]
    services, theirs, pool = described(drafter_address, ours.full_name)
    assert services == sorted([ours.full_name, HEALTH, REFLECTION])
    assert (
        methods(theirs)
        == methods(ours)
        == {"Draft": ("treespec.v1.DraftRequest", "treespec.v1.DraftReply", True, True)}
    )
    request = pool.FindMessageTypeByName("treespec.v1.DraftRequest")
    assert [f.name for f in request.fields] == [f.name for f in drafter_pb2.DraftRequest.DESCRIPTOR.fields]


def test_the_verifier_is_called_from_its_own_description(verifier: int) -> None:
    address = f"127.0.0.1:{verifier}"
    ours = verifier_pb2.DESCRIPTOR.services_by_name["Verifier"]
    services, theirs, pool = described(address, ours.full_name)
    assert services == sorted([ours.full_name, HEALTH, REFLECTION])
    assert methods(theirs) == methods(ours)
    # GetModelInfo with messages made from the reflected descriptors alone, as grpcurl would call it
    method = theirs.methods_by_name["GetModelInfo"]
    request_class = message_factory.GetMessageClass(pool.FindMessageTypeByName(method.input_type.full_name))
    reply_class = message_factory.GetMessageClass(pool.FindMessageTypeByName(method.output_type.full_name))
    with grpc.insecure_channel(address) as channel:
        call = channel.unary_unary(
            f"/{theirs.full_name}/{method.name}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=reply_class.FromString,
        )
        reply = call(request_class(), timeout=10)
    assert reply.DESCRIPTOR.full_name == "treespec.v1.ModelInfo" and reply.context_length > 0
    assert reply.vocab_size == 49152
