-- Run by tests/editors/test_nvim_next_edit.py with `nvim --clean --headless -l`: next edits drawn
-- by the plugin's own drawing function (next_edit.draw), no server and no model, since
-- what an edit of blank lines only looks like depends on the buffer's text alone. CASES
-- (JSON): name -> { lines, edit }; each is drawn in a buffer of its own, and its extmarks
-- are recorded under its name. Writes JSON to $RESULT.
local here = vim.fs.dirname(debug.getinfo(1, "S").source:sub(2))
local H = dofile(vim.fs.joinpath(here, "harness.lua"))
local next_edit = require("completer.next_edit")

for name, case in pairs(vim.json.decode(os.getenv("CASES"))) do
  local buf = vim.api.nvim_create_buf(true, false)
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, case.lines)
  local ok, err = pcall(next_edit.draw, buf, case.edit, "utf-16")
  H.check(name, ok and H.marks(buf, "completer.next_edit") or { error = tostring(err) })
end
H.finish()
