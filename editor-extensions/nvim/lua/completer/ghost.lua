-- Ghost text for Neovim 0.11, which has no inline completion of its own (0.12's
-- vim.lsp.inline_completion replaces this module; see init.lua).
--
-- As the user types in Insert mode, ask the server for textDocument/inlineCompletion
-- (debounced; a newer request cancels the older one) and draw the answer with one
-- extmark: the suggestion's first line as virtual text at the cursor, the other lines
-- as virtual lines below. Typing what the suggestion says next keeps it (the extmark is
-- updated in place, so nothing flickers); anything else clears it and asks again.
--
-- The server's item replaces the rest of the cursor's line: its insertText is the
-- completion followed by what was after the cursor (when that was not blank). A
-- suggestion is kept as that text plus the line around the cursor when it arrived, so
-- that one function (`current`) can tell after every keystroke whether it still holds.
-- With several candidates (the server's generation.candidates), the others are kept
-- beside it, and M.cycle shows the next one that still agrees with what was typed.
--
-- Nothing is drawn while a completion menu is open (Vim's popup menu, nvim-cmp's or
-- blink.cmp's): the menu has the user's attention, and the keys go to it.

local M = {}

M.ns = vim.api.nvim_create_namespace("completer")
M.hl = "CompleterGhost"

-- Copilot's notifications (lsp/protocol.py): an item is shown; part of one was taken.
local DID_SHOW_COMPLETION = "textDocument/didShowCompletion"
local DID_PARTIALLY_ACCEPT_COMPLETION = "textDocument/didPartiallyAcceptCompletion"
local AUTOMATIC = 2 -- lsp.InlineCompletionTriggerKind.Automatic

-- Set by init.lua's setup: the LSP config name, the debounce, whether suggestions are on
-- in a buffer, and whether a next edit waits at the cursor of a buffer (none is asked for
-- there then: the user went to that edit to take it with the same key).
M.options = { name = "completer", debounce_ms = 150, enabled = function(_) return true end,
              held = function(_) return false end }

-- Drop what is drawn in `buf`: the suggestion, its candidates and its extmark.
local function hide(buf, state)
  state.suggestion, state.extmark, state.items = nil, nil, nil
  if vim.api.nvim_buf_is_valid(buf) then
    vim.api.nvim_buf_clear_namespace(buf, M.ns, 0, -1)
  end
end

--- Per attached buffer (buffers.lua keeps them): { timer, pending = {client, id, at}?, seq,
--- suggestion?, extmark?, items?, index?, ask_now? }: `items` are the answer's
--- candidates, `index` the one shown; `at` is where the pending request was made (the
--- changedtick and cursor); `ask_now`: a suggestion was just taken whole, so the next is
--- asked for at once.
--- A suggestion: { row, col (0-based byte column where it starts), before (the line up to
--- col), after (the line after col: what the item replaces), text (the item's insertText
--- less what was taken a word or a line at a time), taken (bytes of the insertText taken
--- so: typed through and accepted in parts), item (the item), command, client_id,
--- accepted (its accept command already ran) }.
local buffers = require("completer.buffers").new("completer.ghost", hide)

--- Whether a completion menu is open: Vim's popup menu, nvim-cmp's or blink.cmp's (looked
--- for only when the user loaded them).
function M.menu_visible()
  if vim.fn.pumvisible() == 1 then
    return true
  end
  local cmp, blink = package.loaded["cmp"], package.loaded["blink.cmp"]
  return (type(cmp) == "table" and type(cmp.visible) == "function" and cmp.visible() == true)
    or (type(blink) == "table" and type(blink.is_menu_visible) == "function" and blink.is_menu_visible() == true)
end

local function client_for(buf)
  return vim.lsp.get_clients({ bufnr = buf, name = M.options.name })[1]
end

local function in_insert_mode()
  return vim.api.nvim_get_mode().mode == "i"
end

--- What is left of a suggestion whose text is `text` once the user typed `typed` of it,
--- with `after` (the rest of the line) still after the cursor: `remaining` is what the
--- item would now insert at the cursor, replacing `after`; `shown` leaves out the copy of
--- `after` at its end, which the buffer shows already. Nil when `typed` does not match.
function M.remaining(text, typed, after)
  if text:sub(1, #typed) ~= typed then
    return nil
  end
  -- A "\r" ending the line (a CRLF line in a buffer whose 'fileformat' is unix) is the
  -- first half of the line break for the server: not text of the line, which the item
  -- would end with.
  after = after:gsub("\r$", "")
  local remaining = text:sub(#typed + 1)
  local shown = remaining
  if after:find("%S") and vim.endswith(remaining, after) then
    shown = remaining:sub(1, #remaining - #after)
  end
  return remaining, shown
end

--- The suggestion as it stands after what the user typed since it arrived, or nil when
--- the line or the cursor no longer agree with it (or nothing of it is left to show).
--- Returns { row, col (the cursor), remaining, shown } (see M.remaining).
local function current(buf)
  local state = buffers:get(buf)
  local s = state and state.suggestion
  if not s or vim.api.nvim_get_current_buf() ~= buf or M.menu_visible() then
    return nil
  end
  local row, col = unpack(vim.api.nvim_win_get_cursor(0))
  row = row - 1
  if row ~= s.row or col < s.col then
    return nil
  end
  local line = vim.api.nvim_buf_get_lines(buf, row, row + 1, false)[1] or ""
  if line:sub(1, s.col) ~= s.before or line:sub(col + 1) ~= s.after then
    return nil -- edited elsewhere on the line, or the cursor moved within it
  end
  local remaining, shown = M.remaining(s.text, line:sub(s.col + 1, col), s.after)
  if not remaining or shown == "" then
    return nil
  end
  return { row = row, col = col, remaining = remaining, shown = shown }
end

-- Virtual text shows a tab as one cell: expand it, as the buffer would.
function M.expand_tabs(buf, text)
  return (text:gsub("\t", string.rep(" ", vim.bo[buf].tabstop)))
end

--- `text` (the server's) as buffer lines: split at each of LSP's line breaks, "\r\n",
--- "\n" and "\r". The server writes a CRLF document's "\r\n"; a buffer's lines hold no
--- break ('fileformat' writes them), and a "\r" left in one shows as ^M and is written
--- as "\r\r\n".
function M.lines(text)
  return vim.split((text:gsub("\r\n?", "\n")), "\n", { plain = true })
end

local function render(buf, cur)
  local state = buffers:get(buf)
  local lines = M.lines(cur.shown)
  local virt_lines = {}
  for i = 2, #lines do
    virt_lines[#virt_lines + 1] = { { M.expand_tabs(buf, lines[i]), M.hl } }
  end
  -- Reusing the extmark id updates it in place: the text shifts as the user types
  -- without being cleared and drawn again. Right gravity (the default) keeps the cursor
  -- before the inline text.
  state.extmark = vim.api.nvim_buf_set_extmark(buf, M.ns, cur.row, cur.col, {
    id = state.extmark,
    virt_text = { { M.expand_tabs(buf, lines[1]), M.hl } },
    virt_text_pos = "inline",
    virt_lines = virt_lines[1] and virt_lines or nil,
    hl_mode = "combine",
  })
end

--- Drop the suggestion, the pending request and the debounce timer of `buf`.
function M.clear(buf)
  buffers:clear(buf)
end

local function on_answer(buf, seq, tick, cursor, line, client, err, result)
  local state = buffers:answered(buf, seq, "inlineCompletion", err)
  if not state then
    return
  end
  if not M.options.enabled(buf) or not in_insert_mode() or vim.api.nvim_get_current_buf() ~= buf
    or vim.api.nvim_buf_get_changedtick(buf) ~= tick or M.menu_visible()
    or not vim.deep_equal(vim.api.nvim_win_get_cursor(0), cursor) then
    return -- the user moved on while the server worked, or a menu opened
  end
  -- Nothing to show is the common answer (also while the models load); snippets are not
  -- used by completer.
  local items = vim.tbl_filter(function(item)
    return type(item.insertText) == "string" and item.insertText ~= ""
  end, result and (result.items or result) or {})
  local col = cursor[2]
  state.items = {}
  for _, item in ipairs(items) do
    state.items[#state.items + 1] = {
      row = cursor[1] - 1,
      col = col,
      before = line:sub(1, col),
      after = line:sub(col + 1),
      text = item.insertText,
      taken = 0,
      item = item,
      command = item.command,
      client_id = client.id,
      accepted = false,
    }
  end
  M.show(buf, 1)
end

--- Show candidate `index` of the last answer in `buf`, if it still agrees with the line;
--- true when it does (and is drawn, and reported as shown).
function M.show(buf, index)
  local state = buffers:get(buf)
  local candidate = state and state.items and state.items[index]
  if not candidate then
    return false
  end
  local previous = state.suggestion
  state.suggestion = candidate
  local cur = current(buf)
  if not cur then
    state.suggestion = previous
    return false
  end
  state.index = index
  render(buf, cur)
  local client = vim.lsp.get_client_by_id(candidate.client_id)
  if client and not client:is_stopped() then
    client:notify(DID_SHOW_COMPLETION, { item = candidate.item })
  end
  return true
end

--- Show the next candidate (`step` 1) or the previous one (-1), going round, skipping those
--- that no longer agree with what was typed; false when no other one can be shown (none,
--- or a part of the shown one was taken already).
function M.cycle(buf, step)
  local state = buffers:get(buf)
  if not current(buf) or not state.items or state.suggestion.taken > 0 then
    return false
  end
  local count = #state.items
  for offset = 1, count - 1 do
    if M.show(buf, (state.index - 1 + offset * step) % count + 1) then
      return true
    end
  end
  return false
end

local function request(buf)
  local state = buffers:get(buf)
  local client = client_for(buf)
  if not state or not client or not client.initialized or not M.options.enabled(buf) or not in_insert_mode()
    or vim.api.nvim_get_current_buf() ~= buf or M.menu_visible() or M.options.held(buf) then
    return
  end
  buffers:cancel(buf) -- newest wins; the server also drops older work for the document itself
  state.seq = state.seq + 1
  local seq = state.seq
  local tick = vim.api.nvim_buf_get_changedtick(buf)
  local cursor = vim.api.nvim_win_get_cursor(0)
  local line = vim.api.nvim_get_current_line()
  local params = vim.lsp.util.make_position_params(0, client.offset_encoding)
  params.context = { triggerKind = AUTOMATIC }
  local ok, id = client:request("textDocument/inlineCompletion", params, function(err, result)
    on_answer(buf, seq, tick, cursor, line, client, err, result)
  end, buf)
  if ok and id and seq == state.seq then
    state.pending = { client = client, id = id, at = { tick, cursor[1], cursor[2] } }
    state.ask_now = false
  end
end

-- nvim-cmp's and blink.cmp's menus open and close without a keystroke of their own (after
-- a delay, or on a key they map): redraw, or ask, the current buffer's suggestion then.
local cmp_watched = false

local function on_menu()
  vim.schedule(function() -- after the menu's own state settled
    M.on_change(vim.api.nvim_get_current_buf())
  end)
end

local function watch_cmp()
  local cmp = package.loaded["cmp"]
  if cmp_watched or type(cmp) ~= "table" or type(cmp.event) ~= "table" then
    return
  end
  cmp_watched = true
  cmp.event:on("menu_opened", on_menu)
  cmp.event:on("menu_closed", on_menu)
end

vim.api.nvim_create_autocmd("User", {
  group = vim.api.nvim_create_augroup("completer.ghost.menus", { clear = true }),
  pattern = { "BlinkCmpMenuOpen", "BlinkCmpMenuClose" },
  desc = "completer: no suggestion while blink.cmp's menu is open",
  callback = on_menu,
})

--- After a keystroke, a cursor move or a menu opening or closing in Insert mode: keep (and
--- shift) the suggestion when the text still matches it, else clear it and ask again
--- after the debounce (once the menu is closed).
function M.on_change(buf)
  local state = buffers:get(buf)
  if not state then
    return
  end
  watch_cmp() -- nvim-cmp is often loaded on the first InsertEnter
  local cur = state.suggestion and current(buf)
  if cur then
    render(buf, cur)
    return
  end
  local row, col = unpack(vim.api.nvim_win_get_cursor(0))
  if state.pending and vim.deep_equal(state.pending.at, { vim.api.nvim_buf_get_changedtick(buf), row, col }) then
    return -- nothing changed since the pending request was made (a second event of one change)
  end
  M.clear(buf)
  if M.options.enabled(buf) and not M.menu_visible() then
    -- After an acceptance the user waits for the next suggestion (the server has it ready:
    -- lsp.prefetch): no keystrokes to skip, so no debounce.
    state.timer:start(state.ask_now and 0 or M.options.debounce_ms, 0, vim.schedule_wrap(function()
      request(buf)
    end))
  end
end

function M.visible(buf)
  return current(buf) ~= nil
end

--- What accept-line and accept-word take from `text`. At a line break (any of LSP's:
--- "\r\n" whole), a line takes the next line with it, so that pressing it again walks
--- down the suggestion; a word is the blanks before it and a run of word characters or
--- of other non-blank characters.
function M.piece(text, kind)
  if kind == "line" then
    return text:match("^\r\n[^\r\n]*") or text:match("^[\r\n][^\r\n]*") or text:match("^[^\r\n]*")
  elseif kind == "word" then
    return text:match("^%s*[%w_]+") or text:match("^%s*[^%w_%s]+") or text
  end
  return text
end

--- Insert `text` at (row, col) of `buf`, shown in the current window, and put the
--- cursor after it. Returns the cursor's new (0-based) row and byte column.
function M.insert(buf, row, col, text)
  local lines = M.lines(text)
  vim.api.nvim_buf_set_text(buf, row, col, row, col, lines)
  row = row + #lines - 1
  col = #lines == 1 and col + #lines[1] or #lines[#lines]
  vim.api.nvim_win_set_cursor(0, { row + 1, col })
  return row, col
end

-- The server counts acceptances through the item's command, once a suggestion is taken
-- whole (in one go or in parts), and parts taken through DID_PARTIALLY_ACCEPT_COMPLETION.
local function run_command(buf, s)
  if s.accepted or not s.command then
    return
  end
  s.accepted = true
  local client = vim.lsp.get_client_by_id(s.client_id)
  if client and not client:is_stopped() then
    client:exec_cmd(s.command, { bufnr = buf })
  end
end

local function report_part(s)
  local client = vim.lsp.get_client_by_id(s.client_id)
  if client and not client:is_stopped() then
    local taken = s.item.insertText:sub(1, s.taken)
    local length = client.offset_encoding == "utf-8" and #taken or vim.str_utfindex(taken, client.offset_encoding)
    client:notify(DID_PARTIALLY_ACCEPT_COMPLETION, { item = s.item, acceptedLength = length })
  end
end

--- Accept the suggestion shown in `buf`: "all", "line" or "word". Returns false when
--- nothing is shown, so that the key can do what it did before.
function M.accept(buf, kind)
  local cur = current(buf)
  if not cur then
    return false
  end
  local state = buffers:get(buf)
  local s = state.suggestion
  local piece = kind == "all" and cur.remaining or M.piece(cur.shown, kind)
  -- What is taken is an undo step of its own, even in the middle of an insert (setting
  -- 'undolevels' closes the undo block, :help undo-break), as a next edit is: `u` right
  -- after takes it back, and only it.
  vim.go.undolevels = vim.go.undolevels
  if kind == "all" then
    -- Replace the rest of the line, as the item's range says: up to a "\r" that ends it
    -- (see M.remaining), which stays. The cursor goes to the end of the completion,
    -- before the text that was after it.
    local line = vim.api.nvim_get_current_line()
    local line_end = line:sub(-1) == "\r" and math.max(cur.col, #line - 1) or #line
    vim.api.nvim_buf_set_text(buf, cur.row, cur.col, cur.row, line_end, M.lines(piece))
    local shown = M.lines(cur.shown)
    local last = #shown == 1 and cur.col + #shown[1] or #shown[#shown]
    M.clear(buf)
    state.ask_now = true
    vim.api.nvim_win_set_cursor(0, { cur.row + #shown, last })
    run_command(buf, s)
  else
    local row, col = M.insert(buf, cur.row, cur.col, piece)
    -- The rest stays shown, anchored at the new cursor.
    s.taken = s.taken + (cur.col - s.col) + #piece
    s.row, s.col, s.before = row, col, vim.api.nvim_get_current_line():sub(1, col)
    s.text = cur.remaining:sub(#piece + 1)
    local rest = current(buf)
    if rest then
      render(buf, rest)
      report_part(s)
    else
      hide(buf, state)
      run_command(buf, s) -- nothing left: taken whole
    end
  end
  vim.go.undolevels = vim.go.undolevels
  return true
end

--- Hide the suggestion; false when there was none.
function M.dismiss(buf)
  local shown = M.visible(buf)
  M.clear(buf)
  return shown
end

function M.attach(buf)
  local group = buffers:attach(buf, {})
  if not group then
    return -- attached already
  end
  -- TextChangedP: the text changed while the popup menu is shown (a completion was
  -- inserted), which TextChangedI does not report. CompleteChanged: the popup menu opened
  -- or moved (init.lua reports nvim-cmp's and blink.cmp's menus).
  vim.api.nvim_create_autocmd({ "InsertEnter", "TextChangedI", "TextChangedP", "CursorMovedI", "CompleteChanged" }, {
    group = group,
    buffer = buf,
    desc = "completer: keep, shift or ask for the suggestion",
    callback = function()
      M.on_change(buf)
    end,
  })
  vim.api.nvim_create_autocmd("CompleteDone", {
    group = group,
    buffer = buf,
    desc = "completer: ask for a suggestion once the popup menu is gone",
    callback = vim.schedule_wrap(function() -- the menu is still up while CompleteDone runs
      M.on_change(buf)
    end),
  })
  vim.api.nvim_create_autocmd({ "InsertLeave", "BufLeave" }, {
    group = group,
    buffer = buf,
    desc = "completer: clear the suggestion",
    callback = function()
      M.clear(buf)
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
