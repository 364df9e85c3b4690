"""The workspace: the folders whose files may be read for context, and how the prompt names them."""

from pathlib import Path


class Workspace:
    """The workspace folders; paths inside them may be used as context."""

    def __init__(self, roots: list[str | Path]):
        self.roots = [Path(root).resolve() for root in roots]

    def contains(self, path: str | Path) -> bool:
        resolved = Path(path).resolve()  # symlinks and ".." resolved: no way out of a root
        return any(resolved.is_relative_to(root) for root in self.roots)

    def relative(self, path: str | Path) -> str:
        """The path as the prompt shows it: relative to its workspace folder when inside one."""
        resolved = Path(path).resolve()
        for root in self.roots:
            if resolved.is_relative_to(root):
                return resolved.relative_to(root).as_posix()
        return Path(path).name
