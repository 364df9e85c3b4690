-- Run by tests/editors/nvim/screen.lua in a Neovim with a screen (its terminal): the
-- user renames the parameter, as in plugin_next_edit.lua's "accept", and leaves Insert
-- mode once the next edit is shown. Then $SHOWN gets the buffer's lines and the next
-- edit's extmarks (JSON), and this Neovim stays until stopped.
local here = vim.fs.dirname(debug.getinfo(1, "S").source:sub(2))
local H = dofile(vim.fs.joinpath(here, "harness.lua"))
local scenario = dofile(vim.fs.joinpath(here, "next_edit_scenario.lua"))

-- No "file" [New] message on opening the file: a long temporary path wraps it into a
-- hit-enter prompt, which would take the keys typed below.
vim.opt.shortmess:append("F")

H.run(function()
  local buf = scenario.open()
  scenario.setup()
  scenario.wait_warmed(H, H.wait_ready())
  H.type("ciww")
  H.wait(function()
    return #scenario.marks(H, buf) > 0
  end, 120000, "a next edit")
  H.type("<Esc>") -- the ghost text goes, the next edit stays
  local marks = scenario.marks(H, buf)
  vim.cmd.redraw()
  vim.fn.writefile({ vim.json.encode({ lines = H.lines(buf), marks = marks }) }, os.getenv("SHOWN"))
  H.wait(function()
    return false
  end, 60000, "the screen to be read")
end)
