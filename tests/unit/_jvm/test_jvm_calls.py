"""Py4J calls without name lookups (statestream/_jvm/calls.py), against a recording gateway client:
building a member or a class sends nothing, and a call is one command naming its target."""

from __future__ import annotations

from types import SimpleNamespace

from py4j import protocol

from statestream._jvm.calls import java_class, static_member


class RecordingClient:
    """A gateway client that records the commands sent and answers each with a Java ``void``."""

    def __init__(self) -> None:
        self.commands: list[str] = []
        self.gateway_property = SimpleNamespace(pool=None)
        self.converters: list = []

    def send_command(self, command: str) -> str:
        self.commands.append(command)
        return protocol.SUCCESS + protocol.VOID_TYPE


def jvm_view(client: RecordingClient) -> SimpleNamespace:
    return SimpleNamespace(_gateway_client=client)


def test_a_static_call_is_one_command_to_its_class() -> None:
    client = RecordingClient()
    member = static_member(jvm_view(client), "org.apache.spark.sql.classic.Dataset", "ofRows")
    assert client.commands == []
    member("x")
    assert len(client.commands) == 1
    command = client.commands[0]
    assert command.startswith(protocol.CALL_COMMAND_NAME + protocol.STATIC_PREFIX + "org.apache.spark.sql.classic.Dataset\nofRows\n")


def test_a_constructor_is_one_command() -> None:
    client = RecordingClient()
    cls = java_class(jvm_view(client), "java.util.HashMap")
    assert client.commands == []
    cls()
    assert len(client.commands) == 1 and client.commands[0].startswith(protocol.CONSTRUCTOR_COMMAND_NAME + "java.util.HashMap\n")
