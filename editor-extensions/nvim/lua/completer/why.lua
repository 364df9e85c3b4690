-- :CompleterWhy's view: what the prompt of a buffer's last decoded completion showed (the
-- server's completer/prompt answer), as markdown in a scratch buffer. M.lines is pure and
-- writes the same lines as the VS Code extension's view (its src/why.ts).

local M = {}

M.buffer_name = "completer://why"

--- A fence longer than any run of backticks in `text`, so that none of them closes it.
local function fence_for(text)
  local longest = 0
  for run in text:gmatch("`+") do
    longest = math.max(longest, #run)
  end
  return string.rep("`", math.max(3, longest + 1))
end

--- The view of `answer` ({ prompt, sections = { { path, why }, ... } }) for the file at
--- `path` (relative to the workspace), as buffer lines.
function M.lines(path, answer)
  local lines = { "# Why this suggestion: " .. path, "" }
  if #answer.sections > 0 then
    vim.list_extend(lines, { "The other files the prompt of its last completion showed, in the prompt's order, and why:", "" })
    for _, section in ipairs(answer.sections) do
      lines[#lines + 1] = string.format("- %s — %s", section.path, section.why)
    end
  else
    lines[#lines + 1] = "The prompt of its last completion showed no other file."
  end
  local fence = fence_for(answer.prompt)
  vim.list_extend(lines, { "", "## The prompt, as the model read it", "", fence })
  vim.list_extend(lines, vim.split(answer.prompt, "\n", { plain = true }))
  lines[#lines + 1] = fence
  return lines
end

--- Show `lines` in the view's scratch buffer (made anew once wiped), in its window or a
--- new split below the current one; the cursor goes there.
function M.show(lines)
  local buf = vim.fn.bufnr(M.buffer_name)
  if buf == -1 then
    buf = vim.api.nvim_create_buf(false, true) -- unlisted; buftype=nofile, noswapfile
    vim.api.nvim_buf_set_name(buf, M.buffer_name)
    vim.bo[buf].bufhidden = "wipe" -- nothing to keep once it is out of sight
    vim.bo[buf].filetype = "markdown"
  end
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].modified = false
  local win = vim.fn.bufwinid(buf)
  if win == -1 then
    win = vim.api.nvim_open_win(buf, true, { split = "below" })
  end
  vim.api.nvim_set_current_win(win)
  vim.api.nvim_win_set_cursor(win, { 1, 0 })
end

return M
