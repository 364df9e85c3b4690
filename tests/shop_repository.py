"""A small repository for the definitions tests: shop/orders.py calls a method of what
shop/client.py's connect() returns, a Transport defined in shop/transport.py, which
orders.py never imports (two imports away); fetch's keyword arguments are in no other file."""

from pathlib import Path

TRANSPORT = '''"""Transport: how a shop's client reaches its warehouse over the network."""


class Transport:
    """One warehouse host, reached over HTTPS."""

    def __init__(self, host: str):
        self.host = host

    def fetch(self, path: str, *, warehouse_region: str = "eu-west", max_staleness_s: int = 30) -> bytes:
        """Read one resource from the warehouse, no older than max_staleness_s."""
        raise NotImplementedError
'''
CLIENT = '''"""The shop's client: a transport per warehouse."""

from shop.transport import Transport


def connect(host: str) -> Transport:
    """A transport to the warehouse at host."""
    return Transport(host)
'''
# A call whose next argument is one of fetch's keywords.
CALL = '''    transport = connect(host)
    return transport.fetch("/orders", '''


def write_shop(root: Path, orders: str, **others: str) -> Path:
    """shop/transport.py, shop/client.py and shop/orders.py under root, and `others`
    (a name under shop/ -> its text)."""
    (root / "shop").mkdir(exist_ok=True)
    for name, text in {"transport.py": TRANSPORT, "client.py": CLIENT, "orders.py": orders, **others}.items():
        (root / "shop" / name).write_text(text)
    return root
