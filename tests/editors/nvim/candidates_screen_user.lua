-- Run by tests/editors/nvim/screen.lua in a Neovim with a screen (its terminal): with
-- generation.candidates 3, the user types on the last line of stats.py, waits for the
-- suggestion and shows the next candidate with <M-]>. Then $SHOWN gets the buffer's lines,
-- the ghost text's extmarks and the first candidate (JSON), and this Neovim stays until
-- stopped.
local here = vim.fs.dirname(debug.getinfo(1, "S").source:sub(2))
local H = dofile(vim.fs.joinpath(here, "harness.lua"))

local TEXT = vim.list_extend(vim.deepcopy(H.STATS), { "def label(values):", "    label = '" })

-- No "file" [New] message on opening the file: a long temporary path wraps it into a
-- hit-enter prompt, which would take the keys typed below.
vim.opt.shortmess:append("F")

H.run(function()
  vim.cmd.edit(vim.fs.joinpath(os.getenv("WORKSPACE"), "stats.py"))
  local buf = vim.api.nvim_get_current_buf()
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, TEXT)
  require("completer").setup({
    cmd = { os.getenv("COMPLETER"), "serve", "--stdio" },
    init_options = {
      models = { preset = "smol" },
      generation = { max_tokens = 16, time_budget_ms = 0, candidates = 3 },
    },
  })
  H.wait_ready()
  vim.api.nvim_win_set_cursor(0, { #TEXT, 0 })
  H.type("A")
  local first = H.wait(function()
    return H.ghost(buf)
  end, 90000, "a suggestion")
  H.type("<M-]>")
  local second = H.wait(function()
    local ghost = H.ghost(buf)
    return ghost and ghost.text ~= first.text and ghost
  end, 10000, "the next candidate")
  H.sleep(1000) -- nothing else comes to replace it
  local now = H.ghost(buf)
  assert(now and now.text == second.text, "the candidate shown changed to " .. vim.inspect(now))
  vim.cmd.redraw()
  local shown = { lines = H.lines(buf), marks = H.marks(buf, "completer"), first = first.text }
  vim.fn.writefile({ vim.json.encode(shown) }, os.getenv("SHOWN"))
  H.wait(function()
    return false
  end, 60000, "the screen to be read")
end)
