-- Run by the tests with `nvim --clean --headless -l`: the screen a user sees. A Neovim
-- with a screen (80 columns by 24 lines, in this one's terminal) runs $USER_SCRIPT (in
-- tests/editors/nvim: next_edit_screen_user.lua renames a parameter and waits for the next edit,
-- candidates_screen_user.lua shows the second candidate) and writes $SHOWN once the screen
-- is set; this one then reads that screen, as text, from the terminal buffer. Writes JSON
-- to $RESULT: { screen = lines, shown = what that Neovim wrote to $SHOWN } or { error }.
local here = vim.fs.dirname(debug.getinfo(1, "S").source:sub(2))
local workspace = os.getenv("WORKSPACE")
local shown = vim.fs.joinpath(workspace, "shown")
local user_result = vim.fs.joinpath(workspace, "user.json") -- the user script's error, if it failed

local function finish(value)
  local file = assert(io.open(os.getenv("RESULT"), "w"))
  file:write(vim.json.encode(value))
  file:close()
  vim.cmd("qall!")
end

vim.o.columns, vim.o.lines = 80, 26 -- the window: 24 lines, with the statusline and cmdline of this one
local job = vim.fn.jobstart({ vim.v.progpath, "--clean", "-S", vim.fs.joinpath(here, os.getenv("USER_SCRIPT")) }, {
  term = true,
  env = { RESULT = user_result, SHOWN = shown },
})
vim.wait(tonumber(os.getenv("TIMEOUT_MS")) - 5000, function()
  return vim.uv.fs_stat(shown) ~= nil or vim.uv.fs_stat(user_result) ~= nil -- shown, or the script failed
end, 100)
if not vim.uv.fs_stat(shown) then
  local screen = vim.api.nvim_buf_get_lines(0, 0, -1, false)
  vim.fn.jobstop(job)
  local user = vim.uv.fs_stat(user_result) and table.concat(vim.fn.readfile(user_result), "\n") or "nothing"
  return finish({ error = "nothing was shown; the screen:\n" .. table.concat(screen, "\n") .. "\nits script wrote "
    .. user })
end
-- The terminal draws what the screen got: read it once it holds still for 300 ms (up to 5 s).
local screen = vim.api.nvim_buf_get_lines(0, 0, -1, false)
for _ = 1, 16 do
  vim.wait(300)
  local now = vim.api.nvim_buf_get_lines(0, 0, -1, false)
  if vim.deep_equal(now, screen) then
    break
  end
  screen = now
end
vim.fn.jobstop(job)
finish({ screen = screen, shown = vim.json.decode(table.concat(vim.fn.readfile(shown), "\n")) })
