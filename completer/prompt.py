"""Prompts. For now the prefix-only form that FIM-less models (the smol pair) need."""

from pathlib import PurePath

# How a file's language writes a line comment, by extension; `#` where unknown.
LINE_COMMENT = {
    **dict.fromkeys(["py", "sh", "bash", "rb", "pl", "r", "yaml", "yml", "toml", "mk", "cmake"], "#"),
    **dict.fromkeys(
        ["c", "h", "cc", "cpp", "hpp", "cs", "java", "js", "jsx", "ts", "tsx", "go", "rs", "swift", "kt", "scala",
         "dart", "php", "zig"],
        "//",
    ),
    **dict.fromkeys(["lua", "sql", "hs", "elm"], "--"),
    **dict.fromkeys(["vim"], '"'),
    **dict.fromkeys(["el", "lisp", "clj", "scm"], ";;"),
}


def path_header(path: str) -> str:
    """A first line naming the file, in its language's comment syntax: models trained on
    repositories predict better when they know the file's name and language."""
    comment = LINE_COMMENT.get(PurePath(path).suffix.lstrip(".").lower(), "#")
    return f"{comment} {path}\n"


def prefix_only_prompt(path: str, prefix: str) -> str:
    return path_header(path) + prefix
