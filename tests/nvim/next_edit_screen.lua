-- Run by tests/test_nvim_next_edit.py with `nvim --clean --headless -l`: the screen a user
-- sees with a next edit shown. A Neovim with a screen (next_edit_screen_user.lua, in this
-- one's terminal, 80 columns by 24 lines) renames the parameter and waits for the next
-- edit; this one reads its screen, as text, from the terminal buffer. Writes JSON to
-- $RESULT: { screen = lines, shown = what that Neovim wrote to $SHOWN } or { error }.
local here = vim.fs.dirname(debug.getinfo(1, "S").source:sub(2))
local workspace = os.getenv("WORKSPACE")
local shown = vim.fs.joinpath(workspace, "shown")

local function finish(value)
  local file = assert(io.open(os.getenv("RESULT"), "w"))
  file:write(vim.json.encode(value))
  file:close()
  vim.cmd("qall!")
end

vim.o.columns, vim.o.lines = 80, 26 -- the window: 24 lines, with the statusline and cmdline of this one
local job = vim.fn.jobstart({ vim.v.progpath, "--clean", "-S", vim.fs.joinpath(here, "next_edit_screen_user.lua") }, {
  term = true,
  env = { RESULT = vim.fs.joinpath(workspace, "user.json"), SHOWN = shown },
})
local ok = vim.wait(tonumber(os.getenv("TIMEOUT_MS")) - 5000, function()
  return vim.uv.fs_stat(shown) ~= nil
end, 100)
if not ok then
  local screen = vim.api.nvim_buf_get_lines(0, 0, -1, false)
  vim.fn.jobstop(job)
  return finish({ error = "no next edit was shown; the screen:\n" .. table.concat(screen, "\n") })
end
vim.wait(500) -- the terminal draws what the screen got
local screen = vim.api.nvim_buf_get_lines(0, 0, -1, false)
vim.fn.jobstop(job)
finish({ screen = screen, shown = vim.json.decode(table.concat(vim.fn.readfile(shown), "\n")) })
