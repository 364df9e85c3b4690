import { describe, expect, it } from "vitest";
import { editView, ghostText, isAtCursor, isCurrent, jumpTarget, lineDiff, suggestionFrom } from "../src/nextEdit";
import { ACCEPT_EDIT_COMMAND, type InlineEdit } from "../src/protocol";

const URI = "file:///project/shapes.py";

function edit(start: [number, number], end: [number, number], text: string, version = 3): InlineEdit {
  return {
    text,
    range: { start: { line: start[0], character: start[1] }, end: { line: end[0], character: end[1] } },
    textDocument: { uri: URI, version },
    command: { title: "Accept next edit", command: ACCEPT_EDIT_COMMAND, arguments: [7, version] },
  };
}

// The uses of a renamed parameter, below the line the user is on (line 3).
const width = edit([4, 11], [4, 16], "w");
const perimeter = edit([8, 16], [8, 21], "w");

describe("suggestionFrom", () => {
  it("puts the edits in document order and takes their accept command", () => {
    const suggestion = suggestionFrom({ edits: [perimeter, width] }, URI, 3);
    expect(suggestion?.edits).toEqual([width, perimeter]);
    expect(suggestion?.command.arguments).toEqual([7, 3]);
  });

  it("gives nothing for no edit, for another version or another document", () => {
    expect(suggestionFrom({ edits: [] }, URI, 3)).toBeUndefined();
    expect(suggestionFrom(null, URI, 3)).toBeUndefined();
    expect(suggestionFrom({ edits: [width] }, URI, 4)).toBeUndefined();
    expect(suggestionFrom({ edits: [width] }, "file:///project/other.py", 3)).toBeUndefined();
    expect(suggestionFrom({ edits: [width, edit([8, 16], [8, 21], "w", 2)] }, URI, 3)).toBeUndefined();
  });

  it("refuses overlapping edits, which VS Code cannot apply in one edit, and takes touching ones", () => {
    expect(suggestionFrom({ edits: [edit([4, 11], [4, 16], "w"), edit([4, 15], [4, 18], "x")] }, URI, 3)).toBeUndefined();
    expect(suggestionFrom({ edits: [edit([4, 11], [4, 16], "w"), edit([4, 16], [4, 16], "x")] }, URI, 3)).toBeDefined();
  });
});

describe("the version check", () => {
  it("shows or applies a suggestion only on the version it was computed for", () => {
    const suggestion = suggestionFrom({ edits: [width] }, URI, 3)!;
    expect(isCurrent(suggestion, URI, 3)).toBe(true);
    expect(isCurrent(suggestion, URI, 4)).toBe(false);
    expect(isCurrent(suggestion, "file:///project/other.py", 3)).toBe(false);
  });
});

describe("Tab", () => {
  const suggestion = suggestionFrom({ edits: [perimeter, width] }, URI, 3)!;

  it("applies at the lines the edits span, and jumps to the first edit from elsewhere", () => {
    expect(isAtCursor(suggestion, { line: 4, character: 0 })).toBe(true);
    expect(isAtCursor(suggestion, { line: 8, character: 30 })).toBe(true);
    expect(isAtCursor(suggestion, { line: 3, character: 10 })).toBe(false);
    expect(isAtCursor(suggestion, { line: 9, character: 0 })).toBe(false);
    expect(jumpTarget(suggestion)).toEqual({ line: 4, character: 11 });
  });
});

describe("editView", () => {
  it("strikes a replaced word through and shows its replacement right after it", () => {
    const view = editView(width, ["    return width * height"]);
    expect(view.removed).toEqual(width.range);
    expect(view.ghost).toEqual({ at: { line: 4, character: 16 }, text: "w" });
    expect(view.diff).toEqual(["-    return width * height", "+    return w * height"]);
  });

  it("shows an insertion as ghost text alone, and a deletion as struck text alone", () => {
    const insertion = editView(edit([3, 9], [3, 9], "w, "), ["def area(width, height):"]);
    expect(insertion.removed).toBeUndefined();
    expect(insertion.ghost).toEqual({ at: { line: 3, character: 9 }, text: "w, " });
    const deletion = editView(edit([3, 9], [3, 16], ""), ["def area(width, height):"]);
    expect(deletion.ghost).toBeUndefined();
    expect(deletion.diff).toEqual(["-def area(width, height):", "+def area(height):"]);
  });

  it("shows a multi-line insertion's first line as ghost text and all of it in the diff", () => {
    const insertion = edit([2, 0], [2, 0], "def perimeter(w, height):\n    return 2 * (w + height)\n");
    const view = editView(insertion, [""]);
    expect(view.ghost?.text).toBe("def perimeter(w, height): …");
    expect(view.lines).toEqual({ first: 2, last: 2 });
    expect(view.diff).toEqual(["+def perimeter(w, height):", "+    return 2 * (w + height)", " "]);
  });

  it("covers every line a multi-line replacement touches", () => {
    const rewrite = edit([3, 4], [4, 25], "area(w, height):\n    return w * height");
    const view = editView(rewrite, ["def area(width, height):", "    return width * height"]);
    expect(view.lines).toEqual({ first: 3, last: 4 });
    expect(view.diff).toEqual([
      "-def area(width, height):",
      "-    return width * height",
      "+def area(w, height):",
      "+    return w * height",
    ]);
  });
});

describe("an edit of blank text only", () => {
  // Struck-through blank lines and ghost text of blanks show nothing, yet Tab would apply
  // them: a label at the edit's start says what it does.
  it("labels the deletion of one blank line and of two, at the edit's start", () => {
    // As seen in a real run: line 1 blank, the edit removes it.
    const one = editView(edit([1, 0], [2, 0], ""), ["", "def area(width, height):"]);
    expect(one.ghost).toEqual({ at: { line: 1, character: 0 }, text: "⌫ 1 blank line" });
    expect(one.removed).toEqual({ start: { line: 1, character: 0 }, end: { line: 2, character: 0 } });
    expect(one.diff).toEqual(["-", " def area(width, height):"]);
    const two = editView(edit([5, 0], [7, 0], ""), ["", "    ", "def perimeter(w, height):"]);
    expect(two.ghost).toEqual({ at: { line: 5, character: 0 }, text: "⌫ 2 blank lines" });
  });

  it("labels the insertion of a blank line", () => {
    const view = editView(edit([2, 0], [2, 0], "\n"), ["def area(width, height):"]);
    expect(view.ghost).toEqual({ at: { line: 2, character: 0 }, text: "↵ 1 blank line" });
    expect(view.removed).toBeUndefined();
    expect(editView(edit([2, 0], [2, 0], "\r\n\r\n"), ["x"]).ghost?.text).toBe("↵ 2 blank lines");
  });

  it("labels a change of whitespace within a line that says something", () => {
    const indent = editView(edit([4, 0], [4, 2], "    "), ["  return width * height"]);
    expect(indent.ghost).toEqual({ at: { line: 4, character: 0 }, text: "␣ whitespace" });
    const trailing = editView(edit([4, 25], [4, 28], ""), ["    return width * height   "]);
    expect(trailing.ghost).toEqual({ at: { line: 4, character: 25 }, text: "␣ whitespace" });
  });

  it("leaves an edit that removes or inserts anything else as it was", () => {
    expect(editView(width, ["    return width * height"]).ghost).toEqual({ at: { line: 4, character: 16 }, text: "w" });
    // Words replaced by a blank: the words struck through show it, with no label.
    const words = editView(edit([3, 9], [3, 16], " "), ["def area(width, height):"]);
    expect(words.removed).toBeDefined();
    expect(words.ghost).toEqual({ at: { line: 3, character: 16 }, text: "" });
    // Blank lines removed with a line that says something.
    expect(editView(edit([1, 0], [3, 0], ""), ["", "x = 1", "y"]).ghost).toBeUndefined();
    // Words inserted among blank lines: they show as ghost text.
    expect(editView(edit([1, 0], [2, 0], "x = 1\n"), ["", "y"]).ghost?.text).toBe("x = 1 …");
  });
});

describe("ghostText", () => {
  it("skips blank lines to the first that says something, and marks that more follows", () => {
    expect(ghostText("\n    total = 0\n")).toBe("    total = 0 …");
    expect(ghostText("\n")).toBe("…");
    expect(ghostText("x")).toBe("x");
  });
});

describe("lineDiff", () => {
  it("keeps the lines both sides begin and end with as context", () => {
    expect(lineDiff(["a", "b", "c"], ["a", "B", "c"])).toEqual([" a", "-b", "+B", " c"]);
    expect(lineDiff(["a"], ["a"])).toEqual([" a"]);
    expect(lineDiff(["a", "a"], ["a"])).toEqual([" a", "-a"]);
  });
});
