-- Next-edit suggestions: the edits the user will make next, anywhere around the cursor,
-- from the server's textDocument/copilotInlineEdit (Copilot's next-edit request, which
-- completer answers when it advertises the copilotInlineEdit experimental capability).
--
-- After a change in Insert mode and a pause (next_edit_debounce_ms), or on request
-- (:CompleterNextEdit), ask for the edits at the cursor, for the buffer's version; show
-- an answer, and apply it, only while the buffer is still at that version. Each edit is
-- drawn with extmarks: the text it removes highlighted, its new text as virtual text
-- (inline after the removed text for a change within a line, virtual lines for one that
-- spans lines); one that only deletes or inserts blank lines, which would show nothing so,
-- as a label at its start ("⌫ 1 blank line"). Any change to the buffer clears the
-- suggestion (or, typed ahead of the autocommands, drops it when it is next looked at).
-- init.lua's keys jump to it, apply it (all its edits, one undo step) or dismiss it; the
-- server hears of each through the edit's commands.

local ghost = require("completer.ghost")

local M = {}

M.ns = vim.api.nvim_create_namespace("completer.next_edit")
M.hl_delete = "CompleterNextEditDelete"
M.hl_insert = "CompleterNextEditInsert"

-- The server's names for them (lsp/protocol.py); tests/editors/test_nvim_plugin.py keeps them equal.
local INLINE_EDIT = "textDocument/copilotInlineEdit"
local DID_SHOW_INLINE_EDIT = "textDocument/didShowInlineEdit"
local REJECT_EDIT_COMMAND = "completer.rejectEdit"
local INLINE_EDIT_CAPABILITY = "copilotInlineEdit"

-- Set by init.lua's setup: the LSP config name, the debounce and whether next edits are on
-- in a buffer.
M.options = { name = "completer", debounce_ms = 500, enabled = function(_) return true end }

-- Drop the suggestion drawn in `buf`.
local function hide(buf, state)
  state.suggestion = nil
  if vim.api.nvim_buf_is_valid(buf) then
    vim.api.nvim_buf_clear_namespace(buf, M.ns, 0, -1)
  end
end

--- Per attached buffer (buffers.lua keeps them): { timer, seq, tick (the changedtick
--- last seen changed), pending = {client, id}?, suggestion? }
--- A suggestion: { edits (the server's, in document order), version (the buffer's LSP
--- version they are for), client_id, encoding (the client's offset encoding, the unit of
--- the edits' ranges) }.
local buffers = require("completer.buffers").new("completer.next_edit", hide)

-- The server's client for `buf` when it answers next edits, initialized.
local function client_for(buf)
  local client = vim.lsp.get_clients({ bufnr = buf, name = M.options.name })[1]
  local experimental = client and client.initialized and client.server_capabilities.experimental
  if type(experimental) == "table" and experimental[INLINE_EDIT_CAPABILITY] then
    return client
  end
end

--- Why no next edit can be asked for in `buf` now, or nil when one can.
function M.unavailable(buf)
  if not M.options.enabled(buf) then
    return "next edits are off (the next_edit option, :CompleterToggle)"
  elseif not buffers:get(buf) then
    return "the server is not attached to this buffer"
  elseif not client_for(buf) then
    return "the server does not offer them (no " .. INLINE_EDIT_CAPABILITY .. " capability), or is starting"
  end
end

--- An LSP position (its character in `encoding`) as a 0-based row and byte column of
--- `buf`; a position past the last line is the end of the buffer.
local function byte_position(buf, position, encoding)
  local count = vim.api.nvim_buf_line_count(buf)
  if position.line >= count then
    return count - 1, #vim.api.nvim_buf_get_lines(buf, count - 1, count, false)[1]
  end
  local line = vim.api.nvim_buf_get_lines(buf, position.line, position.line + 1, false)[1]
  return position.line, vim.str_byteindex(line, encoding, position.character, false)
end

--- The new text of `edit` as virtual lines, and whether they go above its first line
--- (whole lines inserted before it) rather than below its last.
local function virtual_lines(buf, edit, start_col, empty_range)
  local lines = ghost.lines(edit.text) -- a CRLF document's "\r\n" too: no ^M drawn
  local whole_lines = lines[#lines] == ""
  if whole_lines then
    table.remove(lines) -- the text's own last line break: no empty line to show for it
  end
  local virt_lines = {}
  for _, line in ipairs(lines) do
    virt_lines[#virt_lines + 1] = { { ghost.expand_tabs(buf, line), M.hl_insert } }
  end
  return virt_lines, whole_lines and empty_range and start_col == 0
end

--- What an edit that removes `removed` (the buffer's lines it spans) and inserts `text`
--- does, when it only deletes or inserts blank lines: "⌫ 2 blank lines", "↵ 1 blank line",
--- and the highlight to draw that with; nil for any other edit. Drawn as the others, it
--- would show nothing (a highlight stops at the end of a line's text; inserted blank lines
--- would be empty virtual lines, like the buffer's own), yet <Tab> applies it. Blanks
--- changed within a line show already: their highlight has a background.
function M.blank_lines_label(removed, text)
  if table.concat(removed, "\n"):find("%S") or text:find("%S") then
    return nil
  end
  local added = #ghost.lines(text) - #removed -- line breaks inserted less removed
  local count = math.abs(added) .. (math.abs(added) == 1 and " blank line" or " blank lines")
  if added < 0 then
    return "⌫ " .. count, M.hl_delete
  elseif added > 0 then
    return "↵ " .. count, M.hl_insert
  end
end

--- Draw one edit: the range it replaces highlighted, its new text inline after that range
--- when both stay within one line, else as virtual lines; an edit of blank lines only, as a
--- label at its start (M.blank_lines_label). Public for tests/nvim/next_edit_blank.lua.
function M.draw(buf, edit, encoding)
  local start_row, start_col = byte_position(buf, edit.range.start, encoding)
  local end_row, end_col = byte_position(buf, edit.range["end"], encoding)
  local empty_range = start_row == end_row and start_col == end_col
  if not empty_range then
    vim.api.nvim_buf_set_extmark(buf, M.ns, start_row, start_col, {
      end_row = end_row, end_col = end_col, hl_group = M.hl_delete, strict = false })
  end
  local label, hl
  if not edit.text:find("%S") then
    -- pcall: a range written end before start has no text to read (and is drawn as before).
    local ok, removed = pcall(vim.api.nvim_buf_get_text, buf, start_row, start_col, end_row, end_col, {})
    if ok then
      label, hl = M.blank_lines_label(removed, edit.text)
    end
  end
  if label then
    -- A blank after it keeps the label apart from the text that follows on its line.
    vim.api.nvim_buf_set_extmark(buf, M.ns, start_row, start_col, {
      virt_text = { { label, hl }, { " " } }, virt_text_pos = "inline" })
    return
  end
  if start_row == end_row and not edit.text:find("[\r\n]") then
    if edit.text ~= "" then
      vim.api.nvim_buf_set_extmark(buf, M.ns, end_row, end_col, {
        virt_text = { { ghost.expand_tabs(buf, edit.text), M.hl_insert } }, virt_text_pos = "inline" })
    end
    return
  end
  local virt_lines, above = virtual_lines(buf, edit, start_col, empty_range)
  if #virt_lines > 0 then
    local row = above and start_row or end_row
    vim.api.nvim_buf_set_extmark(buf, M.ns, row, 0, { virt_lines = virt_lines, virt_lines_above = above })
  end
end

--- Drop the suggestion, the pending request and the debounce timer of `buf`.
function M.clear(buf)
  buffers:clear(buf)
end

-- Whether `edits` (a result's) are edits of `buf` as it is now: the server computed them
-- for a version, and the buffer may have changed since (a change the server had not
-- heard of yet when it answered).
local function for_buffer_now(buf, edits)
  local uri, version = vim.uri_from_bufnr(buf), vim.lsp.util.buf_versions[buf]
  for _, edit in ipairs(edits) do
    if type(edit) ~= "table" or type(edit.text) ~= "string" or type(edit.range) ~= "table" then
      return false
    end
    local document = edit.textDocument
    if type(document) ~= "table" or document.uri ~= uri or document.version ~= version then
      return false
    end
  end
  return true
end

local function on_answer(buf, seq, client, err, result)
  local state = buffers:answered(buf, seq, INLINE_EDIT, err)
  if not state then
    return
  end
  local edits = type(result) == "table" and type(result.edits) == "table" and result.edits or {}
  if #edits == 0 or not M.options.enabled(buf) or not for_buffer_now(buf, edits) then
    return
  end
  state.suggestion = { edits = edits, version = vim.lsp.util.buf_versions[buf], client_id = client.id,
                       encoding = client.offset_encoding }
  for _, edit in ipairs(edits) do
    M.draw(buf, edit, client.offset_encoding)
  end
  client:notify(DID_SHOW_INLINE_EDIT, { item = { command = edits[1].command } })
end

--- Ask for the next edit at the cursor of `buf` (the current buffer) now, replacing any
--- shown or asked for. False when none can be asked for (see M.unavailable).
function M.request(buf)
  if M.unavailable(buf) or vim.api.nvim_get_current_buf() ~= buf then
    return false
  end
  local state, client = buffers:get(buf), client_for(buf)
  M.clear(buf)
  local seq = state.seq
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  -- Client:request sends the buffer's pending changes first, so the server is at this
  -- version when it reads the request.
  params.textDocument.version = vim.lsp.util.buf_versions[buf]
  local ok, id = client:request(INLINE_EDIT, params, function(err, result)
    on_answer(buf, seq, client, err, result)
  end, buf)
  if ok and id and seq == state.seq then
    state.pending = { client = client, id = id }
  end
  return ok
end

--- After a change to `buf`: clear the suggestion; after one typed in Insert mode
--- (`typing`), ask again once the user pauses. Nothing when the buffer did not change
--- since the last call: leaving Insert mode fires TextChanged for changes TextChangedI
--- reported already, which must not stop the request the typing scheduled.
function M.on_change(buf, typing)
  local state = buffers:get(buf)
  local tick = vim.api.nvim_buf_get_changedtick(buf)
  if not state or tick == state.tick then
    return
  end
  state.tick = tick
  M.clear(buf)
  if typing and M.options.enabled(buf) then
    state.timer:start(M.options.debounce_ms, 0, vim.schedule_wrap(function()
      M.request(buf)
    end))
  end
end

-- The suggestion of `buf`, the current buffer, while the buffer is at the version its
-- edits are for. Keys typed ahead (a mapping, a macro, feedkeys) change the buffer with no
-- TextChangedI until the last of them is read, so a change may not have cleared it yet:
-- a stale one is dropped here, neither reported shown nor applied at shifted positions.
local function shown(buf)
  local state = buffers:get(buf)
  local s = state and state.suggestion
  if not s or vim.api.nvim_get_current_buf() ~= buf then
    return nil
  elseif s.version ~= vim.lsp.util.buf_versions[buf] then
    hide(buf, state)
    return nil
  end
  return s
end

function M.visible(buf)
  return shown(buf) ~= nil
end

--- Whether the cursor is at the suggestion: on the line where its first edit starts.
function M.at_cursor(buf)
  local s = shown(buf)
  return s ~= nil and vim.api.nvim_win_get_cursor(0)[1] - 1 == s.edits[1].range.start.line
end

local function run_command(buf, s, command)
  local client = vim.lsp.get_client_by_id(s.client_id)
  if client and not client:is_stopped() then
    client:exec_cmd(command, { bufnr = buf })
  end
end

-- Apply every edit of `s` as one undo step and put the cursor after the last one's text.
local function apply(buf, s)
  local text_edits = {}
  for _, edit in ipairs(s.edits) do
    text_edits[#text_edits + 1] = { range = edit.range, newText = edit.text }
  end
  local row, col = byte_position(buf, s.edits[#s.edits].range["end"], s.encoding)
  M.clear(buf)
  -- An extmark at the end of the last edit's range ends up after its new text.
  local after = vim.api.nvim_buf_set_extmark(buf, M.ns, row, col, {})
  -- Setting 'undolevels' closes the undo block (:help undo-break), before and after: the
  -- edits are one undo step of their own, even in the middle of an insert.
  vim.go.undolevels = vim.go.undolevels
  -- It splits the new text at "\r\n" and "\r" too (a CRLF document's): no stray ^M.
  vim.lsp.util.apply_text_edits(text_edits, buf, s.encoding)
  vim.go.undolevels = vim.go.undolevels
  local position = vim.api.nvim_buf_get_extmark_by_id(buf, M.ns, after, {})
  vim.api.nvim_buf_del_extmark(buf, M.ns, after)
  vim.api.nvim_win_set_cursor(0, { position[1] + 1, position[2] })
end

--- The accept key: away from the suggestion, move the cursor to its first edit; at it,
--- apply it and run its accept command. False when nothing is shown.
function M.accept(buf)
  local s = shown(buf)
  if not s then
    return false
  end
  if not M.at_cursor(buf) then
    local row, col = byte_position(buf, s.edits[1].range.start, s.encoding)
    vim.api.nvim_win_set_cursor(0, { row + 1, col })
    return true
  end
  apply(buf, s)
  run_command(buf, s, s.edits[1].command)
  return true
end

--- Hide the suggestion and tell the server it was rejected; false when none was shown.
function M.dismiss(buf)
  local s = shown(buf)
  if not s then
    return false
  end
  M.clear(buf)
  local accept = s.edits[1].command or {}
  run_command(buf, s, { title = "Reject next edit", command = REJECT_EDIT_COMMAND, arguments = accept.arguments })
  return true
end

function M.attach(buf)
  local group = buffers:attach(buf, { tick = vim.api.nvim_buf_get_changedtick(buf) })
  if not group then
    return -- attached already
  end
  -- InsertLeave: changes typed ahead (by a mapping, or faster than Neovim redraws) reach
  -- no TextChangedI; they are Insert-mode changes all the same.
  vim.api.nvim_create_autocmd({ "TextChangedI", "TextChangedP", "InsertLeave" }, {
    group = group,
    buffer = buf,
    desc = "completer: clear the next edit, ask again after a pause",
    callback = function()
      M.on_change(buf, true)
    end,
  })
  vim.api.nvim_create_autocmd("TextChanged", {
    group = group,
    buffer = buf,
    desc = "completer: clear the next edit",
    callback = function()
      M.on_change(buf, false)
    end,
  })
end

function M.detach(buf)
  buffers:detach(buf)
end

--- Clear every buffer for which `which(buf)` holds (when suggestions are turned off there).
function M.clear_all(which)
  buffers:clear_all(which)
end

return M
