"""The devices llama.cpp sees, and RPC server addresses checked before ggml's RPC
client, which aborts the process on a server it cannot use, ever sees them."""

import socket
import threading

import pytest

from completer.models.llama import resolve_gpu_layers
from completer.models.devices import (RpcServerError, add_rpc_servers, devices, greet_rpc_server, is_loopback,
                                      offload_devices, parse_rpc_servers)


def test_the_cpu_is_a_device_with_its_memory_and_nothing_offloads_without_a_gpu_or_server():
    found = devices()
    cpu = next(device for device in found if device.kind == "cpu")
    assert cpu.backend == "CPU" and 0 < cpu.free_bytes <= cpu.total_bytes
    assert not cpu.offloads
    assert "GiB free of" in cpu.summary()


def test_rpc_server_lists_are_host_port_pairs_and_a_malformed_one_says_which_part():
    assert parse_rpc_servers("") == []
    assert parse_rpc_servers("127.0.0.1:50052, gpu-box:50053,") == [("127.0.0.1", 50052), ("gpu-box", 50053)]
    assert parse_rpc_servers("[::1]:50052") == [("::1", 50052)]
    for bad in ["127.0.0.1", "127.0.0.1:", ":50052", "host:port", "host:0", "host:70000"]:
        with pytest.raises(ValueError, match=f"RPC server '{bad}': give it as host:port"):
            parse_rpc_servers(f"127.0.0.1:1,{bad}")


def test_only_loopback_addresses_count_as_this_machine():
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("10.1.2.3") and not is_loopback("192.168.0.7")
    assert not is_loopback("no-such-host.invalid")


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]  # nothing listens once the probe is closed


def test_no_server_at_an_address_is_a_clear_error_not_an_abort():
    port = closed_port()
    with pytest.raises(RpcServerError, match=f"no RPC server answers at 127.0.0.1:{port}.*ggml-rpc-server"):
        add_rpc_servers(f"127.0.0.1:{port}")
    with pytest.raises(ValueError, match="give it as host:port"):
        add_rpc_servers("127.0.0.1")


class StandIn:
    """A loopback TCP server that answers each connection with `reply` (None: never)."""

    def __init__(self, reply: bytes | None):
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.reply = reply
        self.held: list[socket.socket] = []
        threading.Thread(target=self.serve, daemon=True).start()

    def serve(self) -> None:
        while True:
            try:
                connection, _ = self.listener.accept()
            except OSError:
                return
            connection.recv(64)
            if self.reply is None:
                self.held.append(connection)  # silent: another client has the server
                continue
            connection.sendall(self.reply)
            connection.close()

    def close(self) -> None:
        self.listener.close()
        for connection in self.held:
            connection.close()


@pytest.mark.parametrize("reply,error", [
    (b"HTTP/1.1 400 Bad Request\r\n\r\n", "answered, but not as a llama.cpp RPC server of protocol 7.0"),
    (None, "did not answer within 1 s: a ggml-rpc-server serves one client at a time"),
])
def test_something_else_at_the_address_is_refused_before_ggml_sees_it(reply, error):
    stand_in = StandIn(reply)
    try:
        with pytest.raises(RpcServerError, match=error):
            greet_rpc_server("127.0.0.1", stand_in.port, timeout_s=1.0)
    finally:
        stand_in.close()


def test_a_server_of_another_protocol_version_is_refused():
    answer = bytes([6, 1, 0, 0]) + bytes(24)  # major 6: an older llama.cpp
    stand_in = StandIn(len(answer).to_bytes(8, "little") + answer)
    try:
        with pytest.raises(RpcServerError, match="speaks protocol 6.1.0, and this llama.cpp 7.0"):
            add_rpc_servers(f"127.0.0.1:{stand_in.port}")
    finally:
        stand_in.close()


def test_auto_puts_no_layer_on_a_gpu_when_llama_cpp_has_no_device_for_one():
    """A build with the RPC backend and no server added has nowhere to offload to
    (llama_supports_gpu_offload() says yes to it all the same). The device tests run
    after this one (conftest), so no RPC server is added yet."""
    assert not offload_devices()
    assert resolve_gpu_layers("auto", 30) == 0
