// What a next-edit suggestion is and how it shows. Pure: no vscode import, so unit tests
// run without an editor; positions are LSP's (0-based lines, UTF-16 characters).
import type { InlineEdit, InlineEditCommand, InlineEditResult, Position, Range } from "./protocol";

// One answer of the server, checked: its edits for one version of one document, in order.
export interface Suggestion {
  uri: string;
  version: number;
  edits: InlineEdit[]; // in document order, none overlapping
  command: InlineEditCommand; // the accept command all its edits carry
}

export function comparePositions(a: Position, b: Position): number {
  return a.line - b.line || a.character - b.character;
}

// The server's answer to a request for `uri` at `version` as a suggestion; undefined when it
// has no edit, is for another version (the document changed while the model wrote), or has
// edits that overlap (VS Code could not apply them in one edit).
export function suggestionFrom(result: InlineEditResult | null | undefined, uri: string, version: number): Suggestion | undefined {
  const edits = [...(result?.edits ?? [])].sort((a, b) => comparePositions(a.range.start, b.range.start));
  if (edits.length === 0) return undefined;
  if (edits.some((edit) => edit.textDocument.uri !== uri || edit.textDocument.version !== version)) return undefined;
  const overlapping = edits.some((edit, i) => i > 0 && comparePositions(edits[i - 1].range.end, edit.range.start) > 0);
  if (overlapping) return undefined;
  return { uri, version, edits, command: edits[0].command };
}

// A suggestion may be shown or applied only on the text it was computed for.
export function isCurrent(suggestion: Suggestion, uri: string, version: number): boolean {
  return suggestion.uri === uri && suggestion.version === version;
}

// The cursor is at the suggestion when it is on a line the edits touch: Tab applies it there,
// and jumps to it from anywhere else.
export function isAtCursor(suggestion: Suggestion, cursor: Position): boolean {
  const first = suggestion.edits[0].range.start.line;
  const last = suggestion.edits[suggestion.edits.length - 1].range.end.line;
  return first <= cursor.line && cursor.line <= last;
}

// Where Tab takes the cursor: the start of the first edit.
export function jumpTarget(suggestion: Suggestion): Position {
  return suggestion.edits[0].range.start;
}

export function isEmpty(range: Range): boolean {
  return comparePositions(range.start, range.end) === 0;
}

function lines(text: string): string[] {
  return text.split(/\r\n|\r|\n/);
}

// How one edit shows: the text it removes struck through, its new text as ghost text right
// after it (decorations hold one line: the first line that says something, then "…"), and
// the whole change as a diff over the lines it touches, for a hover. An edit of blank text
// only would show nothing (struck-through blank lines, ghost text of blanks) though Tab
// applies it: its ghost is a label at its start that says what it does (blankEditLabel).
export interface EditView {
  removed: Range | undefined; // undefined: the edit only inserts
  ghost: { at: Position; text: string } | undefined; // undefined: the edit only deletes
  lines: { first: number; last: number };
  diff: string[]; // unified-diff lines: " context", "-old", "+new"
}

// `touched`: the document's lines range.start.line .. range.end.line, as they are now.
export function editView(edit: InlineEdit, touched: string[]): EditView {
  const { start, end } = edit.range;
  const after = touched[0].slice(0, start.character) + edit.text + touched[touched.length - 1].slice(end.character);
  const label = blankEditLabel(edit, touched);
  let ghost: EditView["ghost"] = undefined;
  if (label !== undefined) ghost = { at: start, text: label };
  else if (edit.text) ghost = { at: end, text: ghostText(edit.text) };
  return {
    removed: isEmpty(edit.range) ? undefined : edit.range,
    ghost,
    lines: { first: start.line, last: end.line },
    diff: lineDiff(touched, lines(after)),
  };
}

const BLANK = /^\s*$/;

// What an edit that removes and inserts only blank text does, in words: the blank lines it
// deletes or inserts (the difference in line breaks), else "whitespace" (indentation,
// trailing blanks). Undefined for an edit with something visible to show, or none at all.
export function blankEditLabel(edit: InlineEdit, touched: string[]): string | undefined {
  const { start, end } = edit.range;
  // The document's text in the range (its line breaks as "\n"): what the edit removes.
  const joined = touched.join("\n");
  const removed = joined.slice(start.character, joined.length - (touched[touched.length - 1].length - end.character));
  if (!BLANK.test(removed) || !BLANK.test(edit.text) || (removed === "" && edit.text === "")) return undefined;
  const added = lines(edit.text).length - 1 - (end.line - start.line); // line breaks inserted less removed
  const count = (n: number) => `${n} blank line${n === 1 ? "" : "s"}`;
  if (added < 0) return `⌫ ${count(-added)}`;
  if (added > 0) return `↵ ${count(added)}`;
  return "␣ whitespace";
}

export function ghostText(text: string): string {
  const all = lines(text);
  const shown = all.find((line) => line.trim()) ?? "";
  return all.length > 1 ? [shown.trimEnd(), "…"].filter(Boolean).join(" ") : shown;
}

// `before` -> `after` as diff lines, the lines both begin and end with kept as context.
export function lineDiff(before: string[], after: string[]): string[] {
  let head = 0;
  while (head < before.length && head < after.length && before[head] === after[head]) head++;
  let tail = 0;
  while (
    tail < before.length - head &&
    tail < after.length - head &&
    before[before.length - 1 - tail] === after[after.length - 1 - tail]
  ) {
    tail++;
  }
  return [
    ...before.slice(0, head).map((line) => ` ${line}`),
    ...before.slice(head, before.length - tail).map((line) => `-${line}`),
    ...after.slice(head, after.length - tail).map((line) => `+${line}`),
    ...before.slice(before.length - tail).map((line) => ` ${line}`),
  ];
}
