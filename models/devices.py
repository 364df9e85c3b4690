"""The devices llama.cpp offloads to, read from ggml's backend registry, and llama.cpp
RPC servers made into devices.

    backends          the backends this build has: CPU, RPC, CUDA, ...
    devices           every device llama.cpp sees: name, description, kind, memory
    add_rpc_servers   each `host:port` where a ggml-rpc-server listens becomes a device

An RPC server is a device exactly as a GPU is: llama.cpp places layers' weights and
KV cache on it and runs those layers there. Two things in ggml's RPC client shape
this module: it aborts the whole process (GGML_ABORT) when a server cannot be reached
or does not speak its protocol, so each server is greeted here first, in its own
protocol, over a connection of our own; and it has no authentication or encryption,
so an address off this machine gets a warning.
"""

import ctypes
import ipaddress
import logging
import socket
import struct
from dataclasses import dataclass

import llama_cpp

from completer.models.errors import ModelError

log = logging.getLogger("completer.devices")

# ggml's functions as libllama resolves them. Not llama_cpp._ggml's libggml.so: a wheel
# holds libggml.so and libggml.so.0 as two copies of one file, libllama loads the
# second, and a backend registered in the first is a device libllama never sees.
_ggml = llama_cpp.llama_cpp._lib
# enum ggml_backend_dev_type, in order.
KINDS = ("cpu", "gpu", "igpu", "accel", "meta")
# llama.cpp puts layers on these kinds; RPC devices say they are GPUs.
OFFLOAD_KINDS = ("gpu", "igpu")
# The pinned llama.cpp's RPC protocol (ggml-rpc.h, ggml-rpc.cpp): a request is
# | command (1 byte) | size (8 bytes) | data |, an answer | size (8 bytes) | data |.
# HELLO (command 14) sends 24 bytes of transport capabilities, zero for none, and is
# answered by major, minor, patch, a pad byte and the server's 24 capability bytes.
RPC_HELLO = 14
RPC_CAPS_BYTES = 24
RPC_PROTOCOL = (7, 0)  # the client refuses another major or a newer minor version
RPC_GREETING_S = 5.0  # a server on this machine or the LAN answers in milliseconds


def _function(name: str, result, *arguments):
    function = getattr(_ggml, name)
    function.restype, function.argtypes = result, list(arguments)
    return function


_reg_count = _function("ggml_backend_reg_count", ctypes.c_size_t)
_reg_get = _function("ggml_backend_reg_get", ctypes.c_void_p, ctypes.c_size_t)
_reg_name = _function("ggml_backend_reg_name", ctypes.c_char_p, ctypes.c_void_p)
_reg_by_name = _function("ggml_backend_reg_by_name", ctypes.c_void_p, ctypes.c_char_p)
_reg_proc_address = _function("ggml_backend_reg_get_proc_address", ctypes.c_void_p, ctypes.c_void_p,
                              ctypes.c_char_p)
_register = _function("ggml_backend_register", None, ctypes.c_void_p)
_load_all = _function("ggml_backend_load_all", None)
_dev_count = _function("ggml_backend_dev_count", ctypes.c_size_t)
_dev_get = _function("ggml_backend_dev_get", ctypes.c_void_p, ctypes.c_size_t)
_dev_name = _function("ggml_backend_dev_name", ctypes.c_char_p, ctypes.c_void_p)
_dev_description = _function("ggml_backend_dev_description", ctypes.c_char_p, ctypes.c_void_p)
_dev_memory = _function("ggml_backend_dev_memory", None, ctypes.c_void_p, ctypes.POINTER(ctypes.c_size_t),
                        ctypes.POINTER(ctypes.c_size_t))
_dev_type = _function("ggml_backend_dev_type", ctypes.c_int, ctypes.c_void_p)
_dev_backend_reg = _function("ggml_backend_dev_backend_reg", ctypes.c_void_p, ctypes.c_void_p)
_ADD_RPC_SERVER = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)

_added_rpc_servers: set[str] = set()


class RpcServerError(ModelError):
    """An RPC server that cannot be used; the message says what to do."""


@dataclass(frozen=True)
class Device:
    name: str  # llama.cpp's: CPU, CUDA0, RPC0, ...
    description: str  # the card's name, or an RPC server's address
    kind: str  # one of KINDS
    backend: str  # the backend that drives it: CPU, CUDA, RPC, ...
    free_bytes: int
    total_bytes: int

    @property
    def offloads(self) -> bool:
        """Whether llama.cpp puts layers on it."""
        return self.kind in OFFLOAD_KINDS

    def summary(self) -> str:
        return (f"{self.description} ({self.backend}): {self.free_bytes / 2**30:.1f} GiB free of "
                f"{self.total_bytes / 2**30:.1f} GiB")


def _ensure_backends() -> None:
    """A build with dynamically loaded backends registers them only when asked."""
    if not _reg_count():
        _load_all()


def backends() -> list[str]:
    _ensure_backends()
    return [_reg_name(_reg_get(i)).decode() for i in range(_reg_count())]


def devices() -> list[Device]:
    _ensure_backends()
    found = []
    for i in range(_dev_count()):
        device = _dev_get(i)
        free, total = ctypes.c_size_t(), ctypes.c_size_t()
        _dev_memory(device, ctypes.byref(free), ctypes.byref(total))
        kind = _dev_type(device)
        found.append(Device(_dev_name(device).decode(), (_dev_description(device) or b"").decode(),
                            KINDS[kind] if kind < len(KINDS) else str(kind),
                            _reg_name(_dev_backend_reg(device)).decode(), free.value, total.value))
    return found


def offload_devices(rpc_servers: str | None = None) -> list[Device]:
    """The devices llama.cpp may put layers on: every GPU, and of the RPC servers added
    in this process those `rpc_servers` (host:port,...) names; None = every one added.
    ggml cannot remove a device once added, so an RPC server taken out of the settings
    is left out here instead, and a model loaded with this list never uses it."""
    named = None if rpc_servers is None else {f"{host}:{port}" for host, port in parse_rpc_servers(rpc_servers)}
    return [device for device in devices()
            if device.offloads and (device.backend != "RPC" or named is None or device.description in named)]


def device_array(chosen: list[Device]) -> ctypes.Array:
    """The chosen devices as llama_model_params.devices takes them: their ggml handles,
    NULL-terminated."""
    names = {device.name for device in chosen}
    handles = [_dev_get(i) for i in range(_dev_count())]
    picked = [handle for handle in handles if _dev_name(handle).decode() in names]
    return (ctypes.c_void_p * (len(picked) + 1))(*picked, None)


def parse_rpc_servers(text: str) -> list[tuple[str, int]]:
    """`host:port,host:port` (llama.cpp's --rpc) as (host, port) pairs; ValueError
    saying which part is wrong."""
    servers = []
    for part in (part.strip() for part in text.split(",")):
        if not part:
            continue
        host, colon, port = part.rpartition(":")
        if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"RPC server {part!r}: give it as host:port, e.g. 127.0.0.1:50052")
        servers.append((host.strip("[]"), int(port)))
    return servers


def is_loopback(host: str) -> bool:
    """Whether every address `host` names is this machine's loopback."""
    try:
        addresses = {info[4][0] for info in socket.getaddrinfo(host, None)}
    except socket.gaierror:
        return False
    return bool(addresses) and all(ipaddress.ip_address(address.split("%")[0]).is_loopback for address in addresses)


def greet_rpc_server(host: str, port: int, timeout_s: float = RPC_GREETING_S) -> tuple[int, int, int]:
    """The protocol version a ggml-rpc-server at host:port answers HELLO with. Raises
    RpcServerError when nothing listens there, or something that is not one."""
    where = f"{host}:{port}"
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as connection:
            connection.sendall(struct.pack("<BQ", RPC_HELLO, RPC_CAPS_BYTES) + bytes(RPC_CAPS_BYTES))
            answer = b""
            while len(answer) < 8 + 4 + RPC_CAPS_BYTES:
                chunk = connection.recv(64)
                if not chunk:
                    break
                answer += chunk
    except TimeoutError:
        raise RpcServerError(f"the RPC server at {where} did not answer within {timeout_s:.0f} s: a ggml-rpc-server "
                             "serves one client at a time, so another program may be using it") from None
    except OSError as error:
        raise RpcServerError(f"no RPC server answers at {where} ({error.strerror or error}): start one there "
                             f"with `ggml-rpc-server --host HOST --port {port}`") from None
    if len(answer) < 12 or struct.unpack_from("<Q", answer)[0] != 4 + RPC_CAPS_BYTES:
        raise RpcServerError(f"{where} answered, but not as a llama.cpp RPC server of protocol "
                             f"{RPC_PROTOCOL[0]}.{RPC_PROTOCOL[1]}")
    return answer[8], answer[9], answer[10]


def add_rpc_servers(text: str) -> list[str]:
    """Make each server in `text` (host:port,...) a device llama.cpp offloads to, once
    per process; the warnings to show the user. Raises RpcServerError (or ValueError
    for a malformed list) before ggml could abort the process."""
    servers = parse_rpc_servers(text)
    if not servers:
        return []
    _ensure_backends()
    rpc = _reg_by_name(b"RPC")
    if not rpc:
        raise RpcServerError("this llama.cpp build has no RPC backend: rebuild llama-cpp-python with -DGGML_RPC=ON "
                             "(`make demo` in a checkout does)")
    add = _ADD_RPC_SERVER(_reg_proc_address(rpc, b"ggml_backend_rpc_add_server"))
    warnings = []
    for host, port in servers:
        endpoint = f"{host}:{port}"
        if endpoint in _added_rpc_servers:
            continue
        if not is_loopback(host):
            warnings.append(f"RPC server {endpoint} is not on this machine: llama.cpp's RPC has no authentication "
                            "or encryption, so anyone who can reach it can use it, and the prompts cross the network")
        major, minor, patch = greet_rpc_server(host, port)
        if major != RPC_PROTOCOL[0] or minor > RPC_PROTOCOL[1]:
            raise RpcServerError(f"the RPC server at {endpoint} speaks protocol {major}.{minor}.{patch}, and this "
                                 f"llama.cpp {RPC_PROTOCOL[0]}.{RPC_PROTOCOL[1]}: run a ggml-rpc-server built from "
                                 "the same llama.cpp as completer's (`completer build` makes one)")
        registry = add(endpoint.encode())
        if not registry:
            raise RpcServerError(f"the RPC server at {endpoint} has no device")
        _register(registry)
        _added_rpc_servers.add(endpoint)
        log.info("RPC server %s added as a device", endpoint)
    return warnings
