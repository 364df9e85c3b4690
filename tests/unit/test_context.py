"""The ring of context chunks and the workspace boundary: pure text code."""

from hypothesis import given
from hypothesis import strategies as st

from completer.config import Config, ContextOptions
from completer.decoders.decoder import Closed, Saved
from completer.editor.completer import Completer
from completer.editor.context import ChunkRing, chunk_around, similarity
from completer.workspace import Workspace
from fake_decoder import FakeDecoder


def code(name: str, lines: int = 20) -> str:
    return "".join(f"def {name}_{i}(x):\n    return x + {i}\n" for i in range(lines // 2))


def ring(tmp_path, **options) -> ChunkRing:
    return ChunkRing(Workspace([tmp_path]), lambda text: len(text.split()), **options)


def test_paths_outside_the_workspace_are_refused_even_through_links(tmp_path):
    (tmp_path / "project").mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "project" / "link").symlink_to(outside)
    workspace = Workspace([tmp_path / "project"])
    assert workspace.contains(tmp_path / "project" / "pkg" / "a.py")
    assert not workspace.contains(tmp_path / "project" / ".." / "outside" / "a.py")
    assert not workspace.contains(tmp_path / "project" / "link" / "a.py")
    assert not Workspace([]).contains(tmp_path / "project" / "a.py")  # no workspace: no context at all
    assert workspace.relative(tmp_path / "project" / "pkg" / "a.py") == "pkg/a.py"


def test_a_near_copy_replaces_its_twin_and_the_oldest_goes_first(tmp_path):
    chunks = ring(tmp_path, capacity=2, chunk_lines=20)
    assert chunks.add(str(tmp_path / "a.py"), code("a"), 5)
    assert chunks.add(str(tmp_path / "a.py"), code("a"), 6)  # the same place again
    assert [c.path for c in chunks.chunks] == ["a.py"]
    chunks.add(str(tmp_path / "b.py"), code("b"), 0)
    chunks.add(str(tmp_path / "c.py"), code("c"), 0)
    assert [c.path for c in chunks.chunks] == ["b.py", "c.py"]
    assert not chunks.add(str(tmp_path / "blank.py"), "\n\n\nx = 1\n", 0)  # too little code to help


def test_an_open_excluded_file_never_becomes_a_chunk(tmp_path):
    """An open .env or secrets file is in the workspace and full of code-like lines: the
    default patterns keep it out of the ring all the same, and so do the user's own."""
    chunks = ring(tmp_path)
    for name in (".env", ".env.local", "secrets.py", "config/credentials.py", "certs/server.pem", "secrets.d/db.py"):
        assert not chunks.add(str(tmp_path / name), code("token"), 0), name
    assert chunks.add(str(tmp_path / "app.py"), code("app"), 0)
    assert [c.path for c in chunks.chunks] == ["app.py"]
    own = ring(tmp_path, exclude=Config(context=ContextOptions(exclude="internal/*")).context.exclude_patterns)
    assert not own.add(str(tmp_path / "internal" / "keys.py"), code("key"), 0)
    assert own.add(str(tmp_path / "secrets.py"), code("app"), 0)  # the user's list replaces the default


def test_chunks_of_a_file_the_new_patterns_exclude_go_at_once(tmp_path):
    chunks = ring(tmp_path, exclude=())
    chunks.add(str(tmp_path / "a.py"), code("a"), 0)
    chunks.add(str(tmp_path / "private" / "b.py"), code("b"), 0)
    chunks.resize(16, 64, ("private",))
    assert [c.path for c in chunks.chunks] == ["a.py"]
    assert not chunks.add(str(tmp_path / "private" / "b.py"), code("b"), 0)


def test_the_completers_ring_follows_the_users_patterns(tmp_path):
    completer = Completer(FakeDecoder(), Config(context=ContextOptions(exclude="vault/*")), Workspace([tmp_path]))
    assert not completer.ring.add(str(tmp_path / "vault" / "keys.py"), code("key"), 0)
    completer.configure(Config())  # back to the default patterns
    assert completer.ring.add(str(tmp_path / "vault" / "keys.py"), code("key"), 0)
    assert not completer.ring.add(str(tmp_path / ".env"), code("token"), 0)


def test_selection_takes_the_newest_that_fit_the_budget_oldest_first(tmp_path):
    chunks = ring(tmp_path, chunk_lines=20)
    for name in "abcd":
        chunks.add(str(tmp_path / f"{name}.py"), code(name), 0)
    each = chunks.chunks[0].tokens
    assert [f.path for f in chunks.select(2 * each)] == ["c.py", "d.py"]
    assert [f.path for f in chunks.select(2 * each, exclude="d.py")] == ["b.py", "c.py"]
    assert chunks.select(each - 1) == ()


@given(st.lists(st.text(alphabet="ab \n", max_size=8), max_size=40), st.integers(0, 50), st.integers(1, 30))
def test_a_chunk_is_consecutive_lines_of_the_text_near_the_line(lines, line, size):
    text = "\n".join(lines)
    chunk = chunk_around(text, line, size)
    assert chunk in text
    assert chunk.count("\n") <= size
    if chunk.strip():
        assert similarity(chunk, chunk) == 1.0


def test_a_save_reaches_the_decoder_only_from_inside_the_workspace_and_not_excluded(tmp_path):
    decoder = FakeDecoder()
    completer = Completer(decoder, Config(context=ContextOptions(exclude="vault/*")), Workspace([tmp_path / "ws"]))
    completer.file_saved(str(tmp_path / "ws" / "a.py"), "a = 1\n")
    completer.file_saved(str(tmp_path / "ws" / "vault" / "keys.py"), "key = 'k'\n")
    completer.file_saved(str(tmp_path / "elsewhere.py"), "b = 2\n")
    completer.close("file:///ws/a.py")
    assert decoder.events == [Saved(str(tmp_path / "ws" / "a.py"), "a = 1\n"), Closed("file:///ws/a.py", None)]
