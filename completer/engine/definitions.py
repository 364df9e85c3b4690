"""The definitions a file makes, and the modules it imports, read from its syntax tree.

    extract(path, text, language) -> Outline
        definitions  functions, methods, classes, structs, interfaces, traits, enums, type
                     aliases, constants, module-level variables and class fields: each with
                     its name, kind, signature (its first lines up to the body), the first
                     line of its docstring or of the comment above it, its file and 1-based
                     line span, and its whole text when that is small
        imports      (module, name imported from it, name bound here) for Python, JavaScript,
                     TypeScript, Go, Rust and Java; a C or C++ file's #include lines

Parsed by tree-sitter (Python, JavaScript, TypeScript and TSX, Go, Rust, Java, C, C++),
never by regular expressions: the walk visits the top level, the bodies of classes, impls,
traits and namespaces, and the blocks a definition may sit in (Python's `if`/`try`, C's
`#if`), not function bodies. A definition whose header tree-sitter had to repair (a name
missing, an ERROR node) is left out, the rest of the file kept: the file being edited is
usually broken somewhere. A file that is mostly not code (more than half of it ERROR
nodes), holds NUL bytes, or is in a language not listed gives an empty outline, and no
input raises.

The grammars are the per-language wheels, not tree-sitter-language-pack. Sizes on PyPI
for CPython 3.11, manylinux x86_64 (all are prebuilt wheels, abi3 but tree-sitter's own):
    per-language: tree-sitter 0.26.1 (674 KB wheel) + 8 grammars (1.28 MB of wheels) =
                  1.95 MB of wheels, 13 MB installed (tree-sitter 2.0, cpp 3.6, typescript
                  3.1, rust 1.3, c 0.7, python 0.6, javascript 0.6, java 0.5, go 0.3 MB)
    tree-sitter-language-pack 1.25.0: 2.4 MB wheel, 5.9 MB installed, but it holds no
                  grammar: it downloads each from the internet on first use, which a
                  machine without access to it (and a privacy-minded user) cannot allow
    tree-sitter-language-pack 0.13.0 (the last that bundles them): 20 MB wheel, 184 MB
                  installed, plus three grammar wheels it requires
"""

import dataclasses
import functools
import logging
import textwrap
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import NamedTuple

import tree_sitter
import tree_sitter_c
import tree_sitter_cpp
import tree_sitter_go
import tree_sitter_java
import tree_sitter_javascript
import tree_sitter_python
import tree_sitter_rust
import tree_sitter_typescript

log = logging.getLogger(__name__)

# A definition's whole text is kept (and shown whole in a prompt) at most this long: a
# short function or a small struct says more than its signature; a long one would crowd
# out the others.
SMALL_TEXT_LINES, SMALL_TEXT_CHARS = 16, 800
# A signature past these is cut (a multi-line parameter list is kept: its keyword
# arguments are what a completion needs; a constant's huge literal is not).
SIGNATURE_LINES, SIGNATURE_CHARS = 12, 600
DOC_CHARS = 200  # of the docstring's first line
MOST_MEMBERS = 24  # member lines in the outline of a class too long to keep whole
MOST_DEFINITIONS = 2_000  # per file: a generated table of constants is not worth more
ERROR_SHARE = 0.5  # of a file's bytes inside ERROR nodes, above which it is not code

COMMENTS = {"comment", "line_comment", "block_comment"}


@dataclass(frozen=True, slots=True)
class Definition:
    name: str
    # function, method, class, struct, union, interface, trait, enum, record, type, constant,
    # variable, field or macro
    kind: str
    signature: str  # its first lines, up to its body
    doc: str  # the first line of its docstring, or of the comment above it; "" when none
    path: str
    start_line: int  # 1-based, first line of the definition (its decorators, export, template)
    end_line: int  # 1-based, inclusive
    container: str = ""  # the class, impl, trait or namespace it is in
    text: str = ""  # the whole definition when small, a class's outline when not; "" otherwise


class Import(NamedTuple):
    module: str  # as written: "pkg.client", ".client", "./util.js", "fmt", "crate::util", "java.util", "shapes.h"
    name: str = ""  # the name imported from it; "" for the module itself
    alias: str = ""  # the name it is bound to here, when not `name` (or the module's local name)


@dataclass(frozen=True)
class Outline:
    definitions: tuple[Definition, ...] = ()
    imports: tuple[Import, ...] = ()


EMPTY = Outline()


@dataclass(frozen=True)
class Grammar:
    """What the walk needs to know of one language's syntax tree (tree-sitter node types)."""

    load: Callable[[], object]  # the grammar's language pointer
    kinds: dict[str, str]  # node type -> kind of the definition it is (its name in field "name")
    members: frozenset[str]  # of those, the ones whose body holds members (methods, fields)
    wrappers: frozenset[str]  # wrap one definition: part of its span and signature (export, decorators, template)
    blocks: frozenset[str]  # walked through for what they hold (namespaces, `if`, `#ifdef`)
    imports: str  # a query capturing import nodes as @import (and JavaScript's require calls as @require)
    declarations: dict[str, Callable] = field(default_factory=dict)  # node type -> its (name node, kind) pairs


class Scope(NamedTuple):
    container: str = ""  # the enclosing definition's name
    is_type: bool = False  # functions in it are methods


# -- the names in declarations, per language -------------------------------------------------


def python_assignment(node, scope: Scope) -> Iterator[tuple[object, str]]:
    """`NAME = value` and `name: type = value` at the top level or in a class body."""
    assignment = node.named_children[0] if node.named_child_count == 1 else None
    if assignment is None or assignment.type != "assignment":
        return
    left = assignment.child_by_field_name("left")
    if left is not None and left.type == "identifier":
        name = text_of(left)
        yield left, "field" if scope.is_type else "constant" if name.isupper() else "variable"


def javascript_declaration(node, scope: Scope) -> Iterator[tuple[object, str]]:
    """`const`/`let`/`var` declarators: a function or class value makes it one."""
    constant = node.child(0) is not None and node.child(0).type == "const"
    for declarator in node.named_children:
        name, value = declarator.child_by_field_name("name"), declarator.child_by_field_name("value")
        if declarator.type != "variable_declarator" or name is None or name.type != "identifier":
            continue
        shape = value.type if value is not None else ""
        if shape in ("arrow_function", "function_expression", "function", "generator_function"):
            yield name, "function"
        elif shape in ("class", "class_expression"):
            yield name, "class"
        else:
            yield name, "constant" if constant else "variable"


def go_specs(node, scope: Scope) -> Iterator[tuple[object, str]]:
    """The names of a `const`, `var` or `type` declaration's specs (several to a spec: `B, C = 2, 3`)."""
    for spec in node.named_children:
        if spec.type in ("type_spec", "type_alias"):
            shape = spec.child_by_field_name("type")
            kind = {"struct_type": "struct", "interface_type": "interface"}.get(shape.type if shape else "", "type")
            yield spec.child_by_field_name("name"), kind
        elif spec.type in ("const_spec", "var_spec"):
            for name in spec.children_by_field_name("name"):
                if name.type == "identifier":
                    yield name, "constant" if spec.type == "const_spec" else "variable"


def java_fields(node, scope: Scope) -> Iterator[tuple[object, str]]:
    """A field declaration's variables: `static final` ones (and an interface's) are constants."""
    modifiers = next((child for child in node.children if child.type == "modifiers"), None)
    words = {child.type for child in modifiers.children} if modifiers is not None else set()
    constant = node.type == "constant_declaration" or {"static", "final"} <= words
    for declarator in node.children_by_field_name("declarator"):
        yield declarator.child_by_field_name("name"), "constant" if constant else "field"


def declarator_name(node):
    """The name a C or C++ declarator declares, through pointers, arrays, references and
    initializers; with whether it declares a function."""
    function = False
    while node is not None:
        if node.type == "function_declarator":
            function = True
        inner = node.child_by_field_name("declarator")
        if inner is None and node.type in ("reference_declarator", "pointer_declarator"):
            inner = node.named_children[-1] if node.named_child_count else None
        if inner is None:
            return node, function
        node = inner
    return None, function


DECLARED_NAMES = {"identifier", "field_identifier", "type_identifier", "qualified_identifier", "destructor_name",
                  "operator_name"}


def c_declaration(node, scope: Scope) -> Iterator[tuple[object, str]]:
    """A declaration's declarators (prototypes, variables, a class's fields), a typedef's
    new names."""
    const = any(child.type == "type_qualifier" and text_of(child) == "const" for child in node.children)
    shape = node.child_by_field_name("type")
    for declarator in node.children_by_field_name("declarator"):
        name, function = declarator_name(declarator)
        if name is None or name.type not in DECLARED_NAMES:
            continue
        if node.type == "type_definition":
            has_body = shape is not None and shape.child_by_field_name("body") is not None
            yield name, shape.type.removesuffix("_specifier") if has_body else "type"
        elif function:
            yield name, "method" if scope.is_type else "function"
        else:
            yield name, "field" if scope.is_type else "constant" if const else "variable"


def c_function(node, scope: Scope) -> Iterator[tuple[object, str]]:
    """A function definition: `Shape::area` is a method of Shape."""
    name, _ = declarator_name(node.child_by_field_name("declarator"))
    if name is not None:
        yield name, "method" if scope.is_type or name.type == "qualified_identifier" else "function"


# -- the grammars ---------------------------------------------------------------------------

JAVASCRIPT_KINDS = {
    "function_declaration": "function", "generator_function_declaration": "function", "class_declaration": "class",
    "method_definition": "method", "field_definition": "field",
}
TYPESCRIPT_KINDS = {
    **JAVASCRIPT_KINDS, "abstract_class_declaration": "class", "interface_declaration": "interface",
    "type_alias_declaration": "type", "enum_declaration": "enum", "function_signature": "function",
    "method_signature": "method", "abstract_method_signature": "method", "public_field_definition": "field",
    "property_signature": "field",
}
JAVASCRIPT_IMPORTS = """(import_statement) @import
(call_expression function: (identifier) @function (#eq? @function "require")
                 arguments: (arguments . (string) .)) @require"""
TYPESCRIPT_IMPORTS = JAVASCRIPT_IMPORTS + "\n(import_require_clause) @require"
C_KINDS = {"struct_specifier": "struct", "union_specifier": "union", "enum_specifier": "enum",
           "preproc_def": "constant", "preproc_function_def": "macro"}
C_BLOCKS = frozenset({"preproc_if", "preproc_ifdef", "preproc_else", "preproc_elif", "preproc_elifdef"})
C_DECLARATIONS = {"declaration": c_declaration, "type_definition": c_declaration, "function_definition": c_function}

GRAMMARS = {
    "python": Grammar(
        tree_sitter_python.language,
        {"function_definition": "function", "class_definition": "class"},
        frozenset({"class_definition"}), frozenset({"decorated_definition"}),
        frozenset({"if_statement", "elif_clause", "else_clause", "try_statement", "except_clause", "finally_clause",
                   "block"}),
        "(import_statement) @import (import_from_statement) @import",
        {"expression_statement": python_assignment}),
    "javascript": Grammar(
        tree_sitter_javascript.language, JAVASCRIPT_KINDS, frozenset({"class_declaration"}),
        frozenset({"export_statement"}), frozenset(), JAVASCRIPT_IMPORTS,
        {"lexical_declaration": javascript_declaration, "variable_declaration": javascript_declaration}),
    "typescript": Grammar(
        tree_sitter_typescript.language_typescript, TYPESCRIPT_KINDS,
        frozenset({"class_declaration", "abstract_class_declaration", "interface_declaration"}),
        frozenset({"export_statement", "ambient_declaration"}),
        frozenset({"internal_module", "module", "expression_statement", "statement_block"}), TYPESCRIPT_IMPORTS,
        {"lexical_declaration": javascript_declaration, "variable_declaration": javascript_declaration}),
    "go": Grammar(
        tree_sitter_go.language, {"function_declaration": "function", "method_declaration": "method"},
        frozenset(), frozenset(), frozenset(), "(import_spec) @import",
        {"const_declaration": go_specs, "var_declaration": go_specs, "type_declaration": go_specs}),
    "rust": Grammar(
        tree_sitter_rust.language,
        {"function_item": "function", "function_signature_item": "function", "struct_item": "struct",
         "enum_item": "enum", "union_item": "union", "trait_item": "trait", "type_item": "type",
         "const_item": "constant", "static_item": "variable", "macro_definition": "macro"},
        frozenset({"trait_item"}), frozenset(), frozenset({"mod_item", "impl_item", "declaration_list"}),
        "(use_declaration) @import"),
    "java": Grammar(
        tree_sitter_java.language,
        {"class_declaration": "class", "interface_declaration": "interface", "enum_declaration": "enum",
         "record_declaration": "record", "annotation_type_declaration": "interface", "method_declaration": "method",
         "constructor_declaration": "method"},
        frozenset({"class_declaration", "interface_declaration", "enum_declaration", "record_declaration"}),
        frozenset(), frozenset({"enum_body_declarations"}), "(import_declaration) @import",
        {"field_declaration": java_fields, "constant_declaration": java_fields}),
    "c": Grammar(tree_sitter_c.language, C_KINDS, frozenset(), frozenset(), C_BLOCKS,
                 "(preproc_include) @import", C_DECLARATIONS),
    "cpp": Grammar(
        tree_sitter_cpp.language, {**C_KINDS, "class_specifier": "class", "alias_declaration": "type"},
        frozenset({"class_specifier", "struct_specifier"}), frozenset({"template_declaration"}),
        C_BLOCKS | {"namespace_definition", "linkage_specification", "declaration_list"},
        "(preproc_include) @import", {**C_DECLARATIONS, "field_declaration": c_declaration}),
}
GRAMMARS["tsx"] = dataclasses.replace(GRAMMARS["typescript"], load=tree_sitter_typescript.language_tsx)

# File name extensions, and the editors' language ids, of each grammar. A .h header is read
# as C++: that grammar takes C as well, and C's does not take C++.
LANGUAGES = {
    **dict.fromkeys(["py", "pyi", "python"], "python"),
    **dict.fromkeys(["js", "jsx", "mjs", "cjs", "javascript", "javascriptreact"], "javascript"),
    **dict.fromkeys(["ts", "mts", "cts", "typescript"], "typescript"),
    **dict.fromkeys(["tsx", "typescriptreact"], "tsx"),
    **dict.fromkeys(["go"], "go"), **dict.fromkeys(["rs", "rust"], "rust"), **dict.fromkeys(["java"], "java"),
    **dict.fromkeys(["c"], "c"),
    **dict.fromkeys(["h", "cc", "cpp", "cxx", "c++", "hpp", "hh", "hxx"], "cpp"),
}


def language_of(path: str, language: str | None = None) -> str | None:
    """The grammar for a file: from the language id given, else from its extension; None
    for one not parsed."""
    if language and language.lower() in LANGUAGES:
        return LANGUAGES[language.lower()]
    return LANGUAGES.get(PurePath(path).suffix.lstrip(".").lower())


@functools.cache
def tree_language(language: str) -> tree_sitter.Language:
    return tree_sitter.Language(GRAMMARS[language].load())


@functools.cache
def import_query(language: str) -> tree_sitter.Query:
    return tree_sitter.Query(tree_language(language), GRAMMARS[language].imports)


def parse(text: str, language: str) -> tree_sitter.Tree:
    # A parser per parse: the index builds on a worker thread while the editor's saves are
    # read on another, and a tree-sitter parser is not to be shared between threads.
    return tree_sitter.Parser(tree_language(language)).parse(text.encode("utf-8", "replace"))


def text_of(node) -> str:
    return node.text.decode("utf-8", "replace") if node is not None else ""


# -- definitions ----------------------------------------------------------------------------


def extract(path: str, text: str, language: str | None = None) -> Outline:
    """The file's definitions and imports; EMPTY for a file that is not code in a language
    listed. Never raises: a file that breaks the walk is logged and gives EMPTY."""
    language = language_of(path, language)
    if language is None or "\0" in text:
        return EMPTY
    try:
        root = parse(text, language).root_node
        if mostly_errors(root):
            return EMPTY
        walk = Walk(GRAMMARS[language], path)
        walk.nodes(root.children, Scope())
        return Outline(tuple(walk.found), tuple(read_imports(root, language)))
    except (ValueError, UnicodeError, RecursionError) as error:
        log.warning("definitions of %s not read: %s", path, error)
        return EMPTY


def mostly_errors(root) -> bool:
    if root.type == "ERROR":
        return True
    broken = sum(child.end_byte - child.start_byte for child in root.children if child.type == "ERROR")
    return broken > ERROR_SHARE * max(1, root.end_byte - root.start_byte)


class Walk:
    """One file's walk: its grammar, and the definitions found so far."""

    def __init__(self, grammar: Grammar, path: str):
        self.grammar = grammar
        self.path = path
        self.found: list[Definition] = []

    def nodes(self, nodes, scope: Scope) -> None:
        for node in nodes:
            if len(self.found) >= MOST_DEFINITIONS:
                return
            if node.is_named and not node.is_missing and node.type != "ERROR":
                self.node(node, node, scope)

    def node(self, node, anchor, scope: Scope) -> None:
        """`anchor`: the outermost wrapper around the node (its span, comment and signature start there)."""
        grammar = self.grammar
        if node.type in grammar.wrappers:
            inner = node.child_by_field_name("definition") or node.child_by_field_name("declaration")
            inner = inner or next((child for child in reversed(node.named_children) if child.type not in COMMENTS),
                                  None)
            if inner is not None:
                self.node(inner, anchor, scope)
        elif node.type in grammar.blocks:
            self.nodes(node.named_children, block_scope(node, scope))
        elif node.type in grammar.kinds:
            kind = grammar.kinds[node.type]
            kind = "method" if kind == "function" and scope.is_type else kind
            name = node.child_by_field_name("name") or node.child_by_field_name("property")  # JavaScript's fields
            definition = self.add(name, kind, node, anchor, receiver_scope(node, scope))
            if definition is not None and node.type in grammar.members:
                first_member = len(self.found)
                self.nodes(body_of(node).named_children, Scope(definition.name, True))
                if not definition.text:
                    self.found[first_member - 1] = dataclasses.replace(
                        definition, text=outline(definition, self.found[first_member:], body_of(node)))
        elif node.type in grammar.declarations:
            single = node.named_child_count == 1 or node.type not in ("const_declaration", "var_declaration",
                                                                       "type_declaration")
            for name, kind in grammar.declarations[node.type](node, scope):
                owner = node if single else name.parent
                self.add(name, kind, owner, anchor if single else owner, scope)

    def add(self, name_node, kind: str, node, anchor, scope: Scope) -> Definition | None:
        if name_node is None or name_node.is_missing or name_node.has_error or header_broken(node):
            return None
        if node.type.endswith("_specifier") and node.child_by_field_name("body") is None:
            return None  # C's `struct point;`, or a struct named where it is used
        name, container = split_qualified(name_node, scope)
        if not name:
            return None
        signature = dedented(anchor, signature_text(node, anchor))
        start_line = anchor.start_point.row + 1
        # A node that takes in its line's end (a #define) ends on the line before.
        end_line = max(start_line, anchor.end_point.row + (anchor.end_point.column > 0))
        small = end_line - start_line < SMALL_TEXT_LINES and anchor.end_byte - anchor.start_byte <= SMALL_TEXT_CHARS
        whole = dedented(anchor, text_of(anchor)) if small else ""
        definition = Definition(name, kind, signature, doc_line(node, anchor), self.path, start_line, end_line,
                                container, whole if whole != signature else "")
        self.found.append(definition)
        return definition


def outline(definition: Definition, members: list[Definition], body) -> str:
    """A class too long to keep whole, as its signature and its members' (the fields a
    constructor takes, the methods' parameters), within SMALL_TEXT_CHARS."""
    braces = body.child_count > 0 and body.child(0).type == "{"
    lines = [definition.signature + (" {" if braces else "")]
    for member in members:
        if member.container != definition.name:
            continue
        stub = member.signature + (" ..." if member.signature.endswith(":") else "")  # Python's `def f():`
        line = textwrap.indent(stub, "    ")
        if len(lines) > MOST_MEMBERS or sum(map(len, lines)) + len(line) > SMALL_TEXT_CHARS:
            lines.append("    ...")
            break
        lines.append(line)
    return "\n".join(lines + ["}"] if braces else lines)


def block_scope(node, scope: Scope) -> Scope:
    """A namespace, module or impl names what it holds; an impl's functions are methods."""
    if node.type == "impl_item":
        return Scope(text_of(node.child_by_field_name("type")), True)
    name = node.child_by_field_name("name")
    return Scope(text_of(name), False) if name is not None and node.type != "preproc_ifdef" else scope


def receiver_scope(node, scope: Scope) -> Scope:
    """A Go method belongs to its receiver's type (`func (c *Circle) Area()`: Circle)."""
    receiver = node.child_by_field_name("receiver") if node.type == "method_declaration" else None
    parameter = receiver.named_children[0] if receiver is not None and receiver.named_child_count else None
    shape = parameter.child_by_field_name("type") if parameter is not None else None
    while shape is not None and shape.type in ("pointer_type", "generic_type"):
        shape = shape.named_children[0] if shape.named_child_count else None
    return Scope(text_of(shape), True) if shape is not None else scope


def body_of(node):
    body = node.child_by_field_name("body")
    return body if body is not None else node


def header_broken(node) -> bool:
    """Whether tree-sitter repaired the definition before its body."""
    body = node.child_by_field_name("body")
    end = body.start_byte if body is not None else node.end_byte
    return any((child.has_error or child.is_missing) and child.start_byte <= end for child in node.children
               if child != body)


def split_qualified(name_node, scope: Scope) -> tuple[str, str]:
    """A name and its container: C++'s `Shape::area` is `area` in Shape."""
    if name_node.type == "qualified_identifier":
        inner = name_node.child_by_field_name("name")
        scope_node = name_node.child_by_field_name("scope")
        if inner is not None and inner.type == "qualified_identifier":
            return split_qualified(inner, Scope(text_of(scope_node)))
        return text_of(inner), text_of(scope_node)
    return text_of(name_node), scope.container


def signature_text(node, anchor) -> str:
    """From the anchor's start to the body's, cut at SIGNATURE_LINES and SIGNATURE_CHARS."""
    body = node.child_by_field_name("body")
    end = body.start_byte if body is not None else anchor.end_byte
    head = anchor.text[: end - anchor.start_byte].decode("utf-8", "replace").rstrip()
    lines = head.split("\n")
    cut = "\n".join(lines[:SIGNATURE_LINES])[:SIGNATURE_CHARS]
    return cut if cut == head else cut.rstrip() + " ..."


def dedented(anchor, text: str) -> str:
    """The text as if its first line started in column 0 (a method's lines lose their indent)."""
    column = anchor.start_point.column
    return textwrap.dedent(" " * column + text) if column else text


def doc_line(node, anchor) -> str:
    """The first line of the docstring (Python) or of the comments just above the anchor."""
    body = node.child_by_field_name("body")
    if body is not None and body.type == "block" and body.named_child_count:
        first = body.named_children[0]
        string = first.named_children[0] if first.named_child_count == 1 else None
        if first.type == "expression_statement" and string is not None and string.type == "string":
            return first_line("".join(text_of(part) for part in string.named_children if part.type == "string_content"))
    comments = leading_comments(anchor)
    return first_line("\n".join(comment_text(text_of(comment)) for comment in comments))


def leading_comments(anchor) -> list:
    """The comments on the lines just above the anchor (attributes between them skipped),
    not one that ends a line of code."""
    found = []
    line = anchor.start_point.row
    sibling = anchor.prev_named_sibling
    while sibling is not None and sibling.type == "attribute_item":  # Rust's #[derive(...)] between
        line, sibling = sibling.start_point.row, sibling.prev_named_sibling
    while sibling is not None and sibling.type in COMMENTS and sibling.end_point.row >= line - 1:
        before = sibling.prev_sibling
        if before is not None and before.end_point.row == sibling.start_point.row and before.type not in COMMENTS:
            break  # a trailing comment of the line before
        found.append(sibling)
        line, sibling = sibling.start_point.row, sibling.prev_named_sibling
    return found[::-1]


def comment_text(comment: str) -> str:
    """A comment without its markers: //, ///, //!, #, /* */, /** */ and the * at line starts."""
    lines = []
    for line in comment.strip().removeprefix("/**").removeprefix("/*").removesuffix("*/").split("\n"):
        line = line.strip()
        for marker in ("///", "//!", "//", "#", "*"):
            if line.startswith(marker):
                line = line[len(marker):]
                break
        lines.append(line.strip())
    return "\n".join(lines)


def first_line(text: str) -> str:
    return next((line.strip() for line in text.split("\n") if line.strip()), "")[:DOC_CHARS]


class Identifier(NamedTuple):
    name: str
    end: int  # byte offset (in UTF-8) where it ends
    member: bool  # after a ".", "->" or "::": a field, a method, or a module's name


MEMBER_ACCESS = {".", "->", "?.", "::"}


def identifiers(text: str, language: str | None) -> list[Identifier]:
    """The identifiers in a piece of code (names of variables, functions, types, fields,
    properties), in order; [] for a language not listed."""
    if language not in GRAMMARS or "\0" in text:
        return []
    return [Identifier(text_of(node), node.end_byte,
                       node.prev_sibling is not None and node.prev_sibling.type in MEMBER_ACCESS)
            for node in leaves(parse(text, language).root_node)
            if node.type.endswith("identifier") and not node.is_missing]


def leaves(root) -> Iterator:
    """The nodes without children under root, in order (a tree cursor: no recursion)."""
    cursor = root.walk()
    descending = True
    while True:
        if descending:
            if cursor.node.child_count == 0:
                yield cursor.node
            if cursor.goto_first_child():
                continue
        if cursor.goto_next_sibling():
            descending = True
        elif cursor.goto_parent():
            descending = False
        else:
            return


# -- imports --------------------------------------------------------------------------------


def read_imports(root, language: str) -> Iterator[Import]:
    captures = tree_sitter.QueryCursor(import_query(language)).captures(root)
    reader = IMPORT_READERS[language.replace("tsx", "typescript")]
    found = [(node, reader) for node in captures.get("import", [])]
    found += [(node, required) for node in captures.get("require", [])]
    for node, read in sorted(found, key=lambda item: item[0].start_byte):  # in the file's order
        yield from read(node)


def python_import(node) -> Iterator[Import]:
    module = text_of(node.child_by_field_name("module_name"))
    for name in node.children_by_field_name("name"):
        original, alias = (name.child_by_field_name("name"), name.child_by_field_name("alias")) \
            if name.type == "aliased_import" else (name, None)
        if node.type == "import_from_statement":
            yield Import(module, text_of(original), text_of(alias))
        else:
            yield Import(text_of(original), "", text_of(alias))
    if node.type == "import_from_statement" and any(child.type == "wildcard_import" for child in node.children):
        yield Import(module)


def string_value(node) -> str:
    return "".join(text_of(part) for part in node.named_children
                   if part.type in ("string_fragment", "string_content", "interpreted_string_literal_content"))


def javascript_import(node) -> Iterator[Import]:
    source = node.child_by_field_name("source")
    module = string_value(source) if source is not None else ""
    clause = next((child for child in node.named_children if child.type == "import_clause"), None)
    if clause is None:  # `import "./side-effect"`; TypeScript's `import x = require("x")` is read as a require
        if source is not None:
            yield Import(module)
        return
    for part in clause.named_children:
        if part.type == "identifier":  # the default export, named here
            yield Import(module, text_of(part))
        elif part.type == "namespace_import":
            yield Import(module, "", text_of(part.named_children[-1]) if part.named_child_count else "")
        elif part.type == "named_imports":
            for specifier in part.named_children:
                if specifier.type == "import_specifier":
                    alias = specifier.child_by_field_name("alias")
                    yield Import(module, text_of(specifier.child_by_field_name("name")), text_of(alias))


def required(node) -> Iterator[Import]:
    """`require("x")`, and TypeScript's `import x = require("x")`."""
    string = next((child for child in reversed(node.named_children) if child.type == "string"), None)
    if string is None:
        arguments = node.child_by_field_name("arguments")
        string = arguments.named_children[0] if arguments is not None and arguments.named_child_count else None
    if string is not None:
        yield Import(string_value(string))


def go_import(node) -> Iterator[Import]:
    path = node.child_by_field_name("path")
    if path is not None:
        yield Import(string_value(path), "", text_of(node.child_by_field_name("name")))


def rust_import(node) -> Iterator[Import]:
    yield from rust_use_tree(node.child_by_field_name("argument"), "")


def rust_path(prefix: str, path: str) -> str:
    return f"{prefix}::{path}" if prefix and path else prefix or path


def rust_use_tree(node, prefix: str) -> Iterator[Import]:
    """`a::b::C`, `a::{b, c::D}`, `a::B as C`, `a::*`: (module, name, alias) for each leaf."""
    if node is None:
        return
    if node.type == "scoped_identifier":
        path, name = node.child_by_field_name("path"), node.child_by_field_name("name")
        yield Import(rust_path(prefix, text_of(path)), text_of(name))
    elif node.type in ("identifier", "crate", "self", "super"):
        yield Import(prefix, text_of(node)) if prefix else Import(text_of(node))
    elif node.type == "use_as_clause":
        for leaf in rust_use_tree(node.child_by_field_name("path"), prefix):
            yield leaf._replace(alias=text_of(node.child_by_field_name("alias")))
    elif node.type == "scoped_use_list":
        inner = rust_path(prefix, text_of(node.child_by_field_name("path")))
        yield from rust_use_tree(node.child_by_field_name("list"), inner)
    elif node.type == "use_list":
        for child in node.named_children:
            yield from rust_use_tree(child, prefix)
    elif node.type == "use_wildcard":
        yield Import(rust_path(prefix, text_of(node.named_children[0])) if node.named_child_count else prefix)


def java_import(node) -> Iterator[Import]:
    path = next((child for child in node.named_children if child.type in ("scoped_identifier", "identifier")), None)
    if path is None:
        return
    if any(child.type == "asterisk" for child in node.children):
        yield Import(text_of(path))
    elif path.type == "scoped_identifier":
        yield Import(text_of(path.child_by_field_name("scope")), text_of(path.child_by_field_name("name")))


def c_include(node) -> Iterator[Import]:
    path = node.child_by_field_name("path")
    if path is not None:
        written = string_value(path) if path.type == "string_literal" else text_of(path).strip("<>")
        yield Import(written)


IMPORT_READERS = {"python": python_import, "javascript": javascript_import, "typescript": javascript_import,
                  "go": go_import, "rust": rust_import, "java": java_import, "c": c_include, "cpp": c_include}
