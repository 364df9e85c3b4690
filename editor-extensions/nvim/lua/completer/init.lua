-- completer.nvim: code completions from completer's local language server (llama.cpp
-- with speculative decoding), shown as ghost text in Insert mode, and next edits: the
-- edits you are likely to make next around the cursor, shown where they would go.
--
--   require('completer').setup({ ... })   -- once, in your config (Neovim >= 0.11)
--
-- setup() registers the server with vim.lsp.config/vim.lsp.enable. On Neovim 0.12+ the
-- built-in vim.lsp.inline_completion draws the suggestions; on 0.11, lua/completer/
-- ghost.lua does. lua/completer/next_edit.lua shows next edits on both. Either way the
-- keys below accept or dismiss them, and do what they did before when nothing is shown.
-- :CompleterWhy shows what the last suggestion's prompt showed (lua/completer/why.lua).
--
-- Options (every one optional; each meaning is `:help completer-options`' own words,
-- and tests/editors/test_nvim_plugin.py checks that this list, `defaults` below and
-- doc/completer.txt agree):
--
--   enabled:                   Show suggestions from the start. :CompleterToggle! turns
--                              them off and on everywhere, :CompleterToggle for the
--                              current buffer's filetype (for the rest of the session);
--                              the server runs either way, so turning them on again is
--                              instant.
--   cmd:                       The command that starts the language server, speaking
--                              LSP on stdio. When its program is not executable,
--                              setup() says so once and starts nothing.
--   filetypes:                 Filetypes to complete in, e.g. `{ "python", "lua" }`. An
--                              empty list means every filetype (of buffers that are
--                              files).
--   root_markers:              Files or folders whose presence marks the workspace root
--                              (see lsp-root_markers). The server takes context from
--                              other open files under that root.
--   init_options:              The server's options, as nested tables, passed as they
--                              are in the `initializationOptions` of `initialize`. The
--                              groups are models, generation, prompt, context, drafting,
--                              cache, lsp and edits; completer's docs/options.md lists
--                              every option.
--                              The machine-level ones are left out, with a warning (see
--                              completer-machine): they go in cmd, as the server's
--                              flags.
--   debounce_ms:               Milliseconds to wait after the last keystroke before
--                              asking for a suggestion: long enough to skip the
--                              keystrokes of a word typed at speed, short enough to feel
--                              immediate. A newer request cancels an older one anyway.
--                              Neovim 0.11 only: the built-in client of 0.12 debounces
--                              itself.
--   use_builtin:               On Neovim 0.12 and newer, let vim.lsp.inline_completion
--                              show the suggestions. Set it to false to use this
--                              plugin's ghost text there too.
--   stats_interval_ms:         completer.statusline() asks the server for its statistics
--                              at most this often.
--   next_edit:                 Suggest next edits: the edits you are likely to make next,
--                              anywhere around the cursor, when the server offers them
--                              (it advertises the copilotInlineEdit capability). They
--                              are asked for after a pause in typing in Insert mode,
--                              and with :CompleterNextEdit.
--   next_edit_debounce_ms:     Milliseconds to wait after the last change in Insert mode
--                              before asking for a next edit: longer than debounce_ms,
--                              as the server rewrites several lines for it, and the
--                              suggestion at the cursor comes first.
--   keymaps.accept:            Insert-mode key that accepts the whole suggestion. With
--                              no suggestion at the cursor, it does what
--                              keymaps.next_edit_accept does.
--   keymaps.accept_line:       Accepts the suggestion's first line; at a line break, the
--                              next line. What is left stays shown.
--   keymaps.accept_word:       Accepts the suggestion's first word (with the blanks
--                              before it). What is left stays shown.
--   keymaps.dismiss:           Hides the suggestion. With no suggestion at the cursor,
--                              it does what keymaps.next_edit_dismiss does.
--   keymaps.next_candidate:    Shows the next of the suggestion's candidates (the
--                              server's generation.candidates), going round.
--   keymaps.previous_candidate: Shows the previous candidate.
--   keymaps.next_edit_accept:  Normal-mode key for a next edit: away from it, moves the
--                              cursor to its first edit; there, applies all its edits,
--                              as one undo step.
--   keymaps.next_edit_dismiss: Normal-mode key that hides the next edit and tells the
--                              server it was rejected.
--   keymaps.next_edit_request: Normal- and Insert-mode key that asks for a next edit at
--                              the cursor now, as :CompleterNextEdit.
--
-- A keymap set to false is not mapped. With nothing shown, each key does what it did
-- before setup() (your own mapping, buffer-local or global, or the key itself); so do the
-- Insert-mode keys while a completion menu is open (Vim's popup menu, nvim-cmp's or
-- blink.cmp's), when no suggestion is drawn.

local ghost = require("completer.ghost")
local next_edit = require("completer.next_edit")
local why = require("completer.why")

local M = {}

local NAME = "completer" -- the LSP config name, and the server's
local STATS = "completer/stats"
local WARM = "completer/warm"
local PROMPT = "completer/prompt"

-- The server's machine-level options (completer/config.py) and its flag for each: where
-- code and keys go, which model files load, which files are never read. A project's files must not choose them, so
-- the server refuses them over LSP; setup() leaves them out of init_options and says to
-- put the flag in cmd. tests/editors/test_nvim_plugin.py keeps this table equal to the server's.
local MACHINE_OPTIONS = {
  ["models.target"] = "--target",
  ["models.draft"] = "--draft",
  ["models.decoder"] = "--decoder",
  ["models.server_url"] = "--server-url",
  ["models.api_key_env"] = "--api-key-env",
  ["models.rpc_servers"] = "--rpc",
  ["context.exclude"] = "--exclude",
}

-- The old names of machine-level options (completer/config.py's RENAMED), old -> new: left
-- out of init_options as the new names are, the warning naming the new one's flag. The
-- server's other old names (server.prefetch...) go in init_options as they are: the server
-- reads them as their new names, with a warning. tests/editors/test_nvim_plugin.py keeps
-- this table equal to the server's.
local MACHINE_OLD_NAMES = {
  ["models.backend"] = "models.decoder",
}

local defaults = {
  enabled = true,
  cmd = { "completer", "serve", "--stdio" },
  filetypes = {},
  root_markers = { ".git" },
  init_options = {},
  -- Long enough to skip the keystrokes of a word typed at speed, short enough to feel
  -- immediate; the server cancels a superseded generation anyway.
  debounce_ms = 150,
  use_builtin = true,
  stats_interval_ms = 3000,
  next_edit = true,
  -- A next edit costs a rewrite of the lines around the cursor (edits.lines_above and
  -- lines_below): ask once the user has paused, not between words.
  next_edit_debounce_ms = 500,
  -- As llama.vim (<Tab>, <S-Tab>, <C-B>) and copilot.vim (<C-]> dismisses); for next
  -- edits, as copilot-lsp's suggested mappings (<Tab> walks to the edit and applies it,
  -- <Esc> in Normal mode clears it).
  keymaps = {
    accept = "<Tab>",
    accept_line = "<S-Tab>",
    accept_word = "<C-B>",
    dismiss = "<C-]>",
    next_candidate = "<M-]>", -- as copilot.vim
    previous_candidate = "<M-[>",
    next_edit_accept = "<Tab>",
    next_edit_dismiss = "<Esc>",
    next_edit_request = "<M-n>",
  },
}

-- Exposed read-only for the documentation test; setup() works on a copy.
M.defaults = vim.deepcopy(defaults)

-- What each key does: `ghost` keys act on the suggestion at the cursor first (`kind`: how
-- much of it they accept), then, with none there, on the next edit (next_edit.lua's
-- function of that name), in the modes they are mapped in.
local KEY_ACTIONS = {
  accept = { modes = { "i" }, ghost = true, kind = "all", next_edit = "accept", desc = "accept the suggestion" },
  accept_line = { modes = { "i" }, ghost = true, kind = "line", desc = "accept a line of the suggestion" },
  accept_word = { modes = { "i" }, ghost = true, kind = "word", desc = "accept a word of the suggestion" },
  dismiss = { modes = { "i" }, ghost = true, next_edit = "dismiss", desc = "dismiss the suggestion" },
  next_candidate = { modes = { "i" }, ghost = true, step = 1, desc = "show the next candidate" },
  previous_candidate = { modes = { "i" }, ghost = true, step = -1, desc = "show the previous candidate" },
  next_edit_accept = { modes = { "n" }, next_edit = "accept", desc = "go to the next edit, or apply it" },
  next_edit_dismiss = { modes = { "n" }, next_edit = "dismiss", desc = "dismiss the next edit" },
  next_edit_request = { modes = { "n", "i" }, next_edit = "request", desc = "ask for a next edit" },
}

M.config = vim.deepcopy(defaults)
M.enabled = defaults.enabled
M.off_filetypes = {} -- filetype -> true: turned off there by :CompleterToggle, for the session
M.failure = nil -- why the server cannot run, once setup() found out
local builtin = false -- vim.lsp.inline_completion draws the suggestions
local registered = false -- setup() has called vim.lsp.config
local saved_keys = {} -- bufnr -> { [name] = { [mode] = { lhs, previous = maparg() dict? } } }
local stats = { value = nil, at = -math.huge, asked_at = nil } -- the last completer/stats answer

local function notify(message, level)
  vim.notify("completer: " .. message, level)
end

-- Whether `value` will do for option `name`, whose default is `default`.
local function valid(name, default, value)
  if name:find("^keymaps%.") then
    return value == false or type(value) == "string"
  elseif name == "cmd" then
    return type(value) == "table" or type(value) == "function" -- vim.lsp accepts both
  end
  return type(value) == type(default)
end

--- `user` over `base`. Lists (cmd, filetypes...) and init_options are replaced, not
--- merged, unlike vim.tbl_deep_extend, which would mix two lists index by index; only
--- keymaps is merged key by key. An unknown option or a value of the wrong type is
--- left out and described in `problems`.
local function merge(base, user, prefix, problems)
  local result = vim.deepcopy(base)
  for key, value in pairs(user) do
    local name = prefix .. key
    if base[key] == nil then
      problems[#problems + 1] = "unknown option " .. name
    elseif key == "keymaps" and type(value) == "table" then
      result[key] = merge(base[key], value, name .. ".", problems)
    elseif not valid(name, base[key], value) then
      problems[#problems + 1] = string.format("%s = %s is not a %s: keeping %s", name, vim.inspect(value),
        type(base[key]), vim.inspect(base[key]))
    else
      result[key] = value
    end
  end
  return result
end

--- `options` (init_options) without the machine-level options, and "name (flag)" of each
--- one left out.
local function without_machine_options(options)
  local kept, dropped = vim.deepcopy(options), {}
  local function leave_out(name, flag)
    local group, key = name:match("^(%w+)%.(.+)$")
    if type(kept[group]) == "table" and kept[group][key] ~= nil then
      kept[group][key] = nil
      dropped[#dropped + 1] = string.format("%s (%s)", name, flag)
    end
  end
  for name, flag in pairs(MACHINE_OPTIONS) do
    leave_out(name, flag)
  end
  for old, new in pairs(MACHINE_OLD_NAMES) do
    leave_out(old, MACHINE_OPTIONS[new])
  end
  table.sort(dropped)
  return kept, dropped
end

-- One server serves every buffer (see reuse_client in setup).
local function our_client()
  return vim.lsp.get_clients({ name = NAME })[1]
end

-- An empty Lua table goes out as a JSON array; the server wants objects.
local function as_object(value)
  if type(value) ~= "table" then
    return value
  elseif next(value) == nil then
    return vim.empty_dict()
  end
  local result = {}
  for key, item in pairs(value) do
    result[key] = as_object(item)
  end
  return result
end

-- Neovim 0.11 shows an error from window/showMessage with nvim_echo, not vim.notify:
-- route the server's messages (a model that failed to load is reported once this way)
-- through vim.notify, with their level, so notification plugins show them like ours.
local LEVELS = vim.log.levels
local MESSAGE_LEVELS = { LEVELS.ERROR, LEVELS.WARN, LEVELS.INFO, LEVELS.DEBUG } -- by lsp.MessageType

local function show_message(_, params)
  local message = params.message
  if not message:find("^completer") then
    message = "completer: " .. message
  end
  vim.notify(message, MESSAGE_LEVELS[params.type] or vim.log.levels.INFO)
  return vim.NIL
end

------------------------------------------------------------------------------
-- Neovim 0.12+: the built-in inline completion, with partial accepts added.

local BUILTIN_NS = "nvim.lsp.inline_completion"

-- Accept a line or a word of the item the built-in client shows: insert that piece
-- ourselves (get()'s on_accept lets us) and run the item's command, as it would.
local function builtin_accept_piece(buf, item, kind)
  local text, range = item.insert_text, item.range
  if type(text) ~= "string" or not range then
    return nil
  end
  local row, col = unpack(vim.api.nvim_win_get_cursor(0))
  row = row - 1
  if row ~= range.start.row or col < range.start.col then
    return nil
  end
  local line = vim.api.nvim_get_current_line()
  local _, shown = ghost.remaining(text, line:sub(range.start.col + 1, col), line:sub(col + 1))
  if not shown or shown == "" then
    return nil
  end
  ghost.insert(buf, row, col, ghost.piece(shown, kind))
  local client = vim.lsp.get_client_by_id(item.client_id)
  if item.command and client then
    client:exec_cmd(item.command, { bufnr = buf })
  end
  return nil -- applied here: the built-in client must not apply the whole item
end

local function builtin_shown(buf)
  local ns = vim.api.nvim_get_namespaces()[BUILTIN_NS]
  return ns ~= nil and #vim.api.nvim_buf_get_extmarks(buf, ns, 0, -1, { limit = 1 }) > 0
end

local function builtin_enable(on)
  for _, client in ipairs(vim.lsp.get_clients({ name = NAME })) do
    vim.lsp.inline_completion.enable(on, { client_id = client.id })
  end
end

------------------------------------------------------------------------------
-- Keys: act on the suggestion when one is shown, else do what the key did before.

--- Perform `name` (accept, accept_line, accept_word, dismiss, next_candidate,
--- previous_candidate) on the suggestion shown in `buf`; false when none is shown.
local function act_on_ghost(buf, name)
  local kind, step = KEY_ACTIONS[name].kind, KEY_ACTIONS[name].step
  if not builtin then
    if name == "dismiss" then
      return ghost.dismiss(buf)
    elseif step then
      return ghost.cycle(buf, step)
    end
    return ghost.accept(buf, kind)
  end
  if step then
    if not builtin_shown(buf) then
      return false
    end
    vim.lsp.inline_completion.select({ bufnr = buf, count = step })
    return true
  elseif name == "dismiss" then
    if not builtin_shown(buf) then
      return false
    end
    builtin_enable(false) -- the built-in client has no dismiss: reset it
    builtin_enable(true)
    return true
  elseif kind == "all" then
    return vim.lsp.inline_completion.get({ bufnr = buf }) == true
  end
  return vim.lsp.inline_completion.get({
    bufnr = buf,
    on_accept = function(item)
      return builtin_accept_piece(buf, item, kind)
    end,
  }) == true
end

local function feed(keys, noremap)
  -- "i": before the rest of the typeahead, so that keys typed after this one stay after.
  vim.api.nvim_feedkeys(keys, noremap and "ni" or "mi", false)
end

--- Do what `lhs` did before setup: replay the mapping `previous` (a maparg() dict), or
--- type the key itself. Our own mapping is not an <expr> one, so that a replayed Lua
--- callback may change the text (an <expr> mapping runs under textlock).
local function fall_through(lhs, previous)
  if not previous then
    return feed(vim.keycode(lhs), true)
  end
  local noremap = previous.noremap == 1 or previous.script == 1
  if previous.callback then
    local keys = previous.callback()
    if previous.expr == 1 and type(keys) == "string" then
      feed(vim.keycode(keys), noremap) -- vim.keymap.set's <expr> default replace_keycodes
    end
    return
  end
  local rhs = previous.rhs or ""
  if rhs:lower() == "<nop>" then
    return
  end
  rhs = rhs:gsub("<[Ss][Ii][Dd]>", "<SNR>" .. (previous.sid or 0) .. "_")
  if previous.expr == 1 then
    feed(vim.api.nvim_eval(rhs), noremap) -- an expression's result is keys already
  else
    feed(vim.keycode(rhs), noremap)
  end
end

--- Perform key `name` in `buf`: on the suggestion at the cursor, which wins, else on the
--- next edit. False when neither is shown (or a next edit cannot be asked for).
local function act(buf, name)
  local action = KEY_ACTIONS[name]
  if action.ghost and act_on_ghost(buf, name) then
    return true
  end
  return action.next_edit ~= nil and next_edit[action.next_edit](buf)
end

local function press(buf, name, mode)
  -- An open completion menu takes the keys: Tab picks from it, as without this plugin.
  if M.active(buf) and not (mode == "i" and ghost.menu_visible()) and act(buf, name) then
    return
  end
  local key = ((saved_keys[buf] or {})[name] or {})[mode]
  if key then
    fall_through(key.lhs, key.previous)
  end
end

-- Buffer-local maps, set when the server attaches: they win over a global mapping of the
-- same key, and a buffer-local one (an ftplugin's) is kept to fall through to.
local function map_keys(buf)
  if saved_keys[buf] then
    return
  end
  saved_keys[buf] = {}
  for name, lhs in pairs(M.config.keymaps) do
    if lhs and KEY_ACTIONS[name] then
      saved_keys[buf][name] = {}
      for _, mode in ipairs(KEY_ACTIONS[name].modes) do
        local previous = vim.api.nvim_buf_call(buf, function()
          return vim.fn.maparg(lhs, mode, false, true)
        end)
        saved_keys[buf][name][mode] = { lhs = lhs, previous = next(previous) ~= nil and previous or nil }
        vim.keymap.set(mode, lhs, function()
          press(buf, name, mode)
        end, { buffer = buf, silent = true, desc = "completer: " .. KEY_ACTIONS[name].desc })
      end
    end
  end
end

local function unmap_keys(buf)
  local keys = saved_keys[buf]
  saved_keys[buf] = nil
  if not keys or not vim.api.nvim_buf_is_valid(buf) then
    return
  end
  for _, modes in pairs(keys) do
    for mode, key in pairs(modes) do
      pcall(vim.keymap.del, mode, key.lhs, { buffer = buf })
      if key.previous and key.previous.buffer == 1 then
        vim.api.nvim_buf_call(buf, function()
          vim.fn.mapset(mode, false, key.previous)
        end)
      end
    end
  end
end

------------------------------------------------------------------------------
-- Statistics: the statusline and :CompleterStats.

local function ask_stats(client, on_answer)
  stats.asked_at = vim.uv.now()
  client:request(STATS, vim.empty_dict(), function(err, result)
    stats.asked_at = nil
    stats.at = vim.uv.now()
    if not err and type(result) == "table" then
      stats.value = result
    end
    if on_answer then
      on_answer(err, result)
    end
    vim.cmd.redrawstatus()
  end)
end

--- A short status for the statusline, e.g. "completer: drafts 72% accepted, 35.2 tok/s";
--- "completer: loading" until the models are ready, "completer: error" when they (or
--- the server) failed, "completer: off" when toggled off, "" with no server. Never
--- waits: it shows the last answer and asks again at most every stats_interval_ms.
--- Use it as %{v:lua.require'completer'.statusline()}.
function M.statusline()
  if M.failure then
    return "completer: error"
  end
  local client = our_client()
  if not client then
    return ""
  end
  if not M.active(vim.api.nvim_get_current_buf()) then
    return "completer: off"
  end
  local now = vim.uv.now()
  -- An answer that never came (a server that died) does not block asking again.
  local waiting = stats.asked_at and now - stats.asked_at < 10000
  if client.initialized and not waiting and now - stats.at >= M.config.stats_interval_ms then
    stats.asked_at = now
    vim.schedule(function() -- not from inside the statusline's evaluation
      if not client:is_stopped() then
        ask_stats(client)
      end
    end)
  end
  local value = stats.value
  if value and value.error ~= nil and value.error ~= "" then
    return "completer: error"
  elseif not value or not value.ready then
    return "completer: loading"
  end
  -- The draft acceptance rate, as VS Code's status bar: what speculation is buying.
  return string.format("completer: drafts %d%% accepted, %.1f tok/s",
    math.floor(value.draft_acceptance_rate * 100 + 0.5), value.tokens_per_second)
end

--- Our client, or nil when the server is not running, which the user is told, with why.
local function running_client()
  local client = our_client()
  if not client then
    notify("the server is not running" .. (M.failure and ": " .. M.failure or ""), vim.log.levels.WARN)
  end
  return client
end

--- :CompleterStats: the server's counters, one per line.
function M.show_stats()
  local client = running_client()
  if not client then
    return
  end
  ask_stats(client, function(err, result)
    if err or type(result) ~= "table" then
      notify("completer/stats failed: " .. (err and err.message or "no answer"), vim.log.levels.ERROR)
      return
    end
    local names = vim.tbl_keys(result)
    table.sort(names)
    local lines = {}
    for _, name in ipairs(names) do
      local value = result[name]
      value = type(value) == "number" and value % 1 ~= 0 and string.format("%.3f", value) or tostring(value)
      lines[#lines + 1] = string.format("%-27s %s", name, value)
    end
    vim.api.nvim_echo({ { table.concat(lines, "\n") } }, true, {})
  end)
end

--- Whether suggestions are on in `buf`: on everywhere, and not turned off for its filetype.
function M.active(buf)
  return M.enabled and not M.off_filetypes[vim.bo[buf].filetype]
end

--- :CompleterToggle! (no `filetype`): suggestions off everywhere (nothing asked, nothing
--- shown, keys fall through) or on again. :CompleterToggle: the same for the buffers of
--- `filetype` only, remembered for the session. `on` forces a state.
function M.toggle(on, filetype)
  if filetype then
    if on == nil then
      on = M.off_filetypes[filetype] == true
    end
    M.off_filetypes[filetype] = (not on) or nil
  else
    if on == nil then
      on = not M.enabled
    end
    M.enabled = on
  end
  local function affected(buf)
    return filetype == nil or vim.bo[buf].filetype == filetype
  end
  if builtin then
    for _, client in ipairs(vim.lsp.get_clients({ name = NAME })) do
      for buf in pairs(client.attached_buffers) do
        if affected(buf) then
          vim.lsp.inline_completion.enable(M.active(buf), { bufnr = buf })
        end
      end
    end
  elseif not on then
    ghost.clear_all(affected)
  end
  if not on then
    next_edit.clear_all(affected)
  end
  local where = filetype and (" for " .. (filetype ~= "" and filetype or "buffers with no filetype")) or ""
  notify("suggestions " .. (on and "on" or "off") .. where, vim.log.levels.INFO)
end

--- :CompleterNextEdit: ask for a next edit at the cursor now, or say why none can be.
function M.request_next_edit()
  local buf = vim.api.nvim_get_current_buf()
  local reason = next_edit.unavailable(buf)
  if reason then
    notify("no next edit: " .. reason, vim.log.levels.WARN)
  else
    next_edit.request(buf)
  end
end

--- :CompleterWhy: what the prompt of the current buffer's last decoded completion showed,
--- and why, in a scratch buffer (completer.why); a message when there was none yet.
function M.why()
  local client = running_client()
  if not client then
    return
  end
  local buf = vim.api.nvim_get_current_buf()
  local name = vim.api.nvim_buf_get_name(buf)
  local path = client.root_dir and vim.fs.relpath(client.root_dir, name) or vim.fn.fnamemodify(name, ":~:.")
  client:request(PROMPT, { uri = vim.uri_from_bufnr(buf) }, function(err, answer)
    if err then
      notify(PROMPT .. " failed: " .. err.message, vim.log.levels.ERROR)
    elseif type(answer) ~= "table" then
      notify("no completion has been decoded in this document yet", vim.log.levels.INFO)
    else
      why.show(why.lines(path, answer))
    end
  end, buf)
end

------------------------------------------------------------------------------
-- Setup.

-- The user is at the cursor of the current buffer, just opened or entered: the server
-- evaluates the prompt there ahead of the first suggestion (completer/warm).
local function warm(buf)
  local client = our_client()
  if client and buf == vim.api.nvim_get_current_buf() then
    client:notify(WARM, vim.lsp.util.make_position_params(0, client.offset_encoding))
  end
end

local function on_attach(buf, client)
  if builtin then
    vim.lsp.inline_completion.enable(M.enabled, { client_id = client.id })
    if not M.active(buf) then -- its filetype was turned off
      vim.lsp.inline_completion.enable(false, { bufnr = buf })
    end
  else
    ghost.attach(buf)
  end
  next_edit.attach(buf)
  map_keys(buf)
  vim.api.nvim_create_autocmd("BufEnter", {
    group = vim.api.nvim_create_augroup("completer_warm_" .. buf, { clear = true }),
    buffer = buf,
    callback = function()
      warm(buf)
    end,
  })
  warm(buf)
end

local function on_detach(buf)
  ghost.detach(buf)
  next_edit.detach(buf)
  unmap_keys(buf)
  pcall(vim.api.nvim_del_augroup_by_name, "completer_warm_" .. buf)
end

function M.setup(opts)
  local problems = {}
  M.config = merge(defaults, opts or {}, "", problems)
  M.enabled = M.config.enabled
  M.failure = nil
  if #problems > 0 then
    table.sort(problems)
    notify(table.concat(problems, "; ") .. " (see :help completer-options)", vim.log.levels.WARN)
  end
  local init_options, dropped = without_machine_options(M.config.init_options)
  if #dropped > 0 then
    notify("init_options " .. table.concat(dropped, ", ") .. " left out: the server takes machine-level "
      .. "options only as its flags, in cmd (see :help completer-machine)", vim.log.levels.WARN)
  end

  local group = vim.api.nvim_create_augroup("completer", { clear = true })
  local function link_highlights()
    vim.api.nvim_set_hl(0, ghost.hl, { link = "Comment", default = true })
    vim.api.nvim_set_hl(0, next_edit.hl_delete, { link = "DiffDelete", default = true })
    vim.api.nvim_set_hl(0, next_edit.hl_insert, { link = "DiffAdd", default = true })
  end
  link_highlights()
  vim.api.nvim_create_autocmd("ColorScheme", { group = group, callback = link_highlights }) -- :hi clear drops them
  vim.api.nvim_create_user_command("CompleterStats", M.show_stats,
    { desc = "completer: the server's statistics" })
  vim.api.nvim_create_user_command("CompleterToggle", function(command)
    M.toggle(nil, not command.bang and vim.bo.filetype or nil)
  end, { bang = true, desc = "completer: suggestions on/off for this filetype (with !: everywhere)" })
  vim.api.nvim_create_user_command("CompleterNextEdit", M.request_next_edit,
    { desc = "completer: ask for a next edit at the cursor" })
  vim.api.nvim_create_user_command("CompleterWhy", M.why,
    { desc = "completer: what the prompt of this buffer's last suggestion showed, and why" })

  if vim.fn.has("nvim-0.11") == 0 then
    M.failure = "Neovim 0.11 or newer is needed (vim.lsp.config)"
    notify(M.failure, vim.log.levels.ERROR)
    return
  end
  -- vim.lsp.enable skips a command that is not executable with only a line in the LSP
  -- log: say it once here, and do not enable the server.
  local cmd = M.config.cmd
  if type(cmd) == "table" and vim.fn.executable(cmd[1] or "") == 0 then
    M.failure = string.format("`%s` is not executable: install the completer Python package "
      .. "or set the cmd option to its full path", tostring(cmd[1]))
    notify(M.failure, vim.log.levels.ERROR)
    return
  end

  builtin = M.config.use_builtin and vim.fn.has("nvim-0.12") == 1 and vim.lsp.inline_completion ~= nil
  ghost.options = {
    name = NAME,
    debounce_ms = M.config.debounce_ms,
    enabled = M.active,
    held = next_edit.at_cursor,
  }
  next_edit.options = {
    name = NAME,
    debounce_ms = M.config.next_edit_debounce_ms,
    enabled = function(buf)
      return M.active(buf) and M.config.next_edit
    end,
  }

  vim.api.nvim_create_autocmd("LspAttach", {
    group = group,
    callback = function(args)
      local client = vim.lsp.get_client_by_id(args.data.client_id)
      if client and client.name == NAME then
        on_attach(args.buf, client)
      end
    end,
  })
  vim.api.nvim_create_autocmd("LspDetach", {
    group = group,
    callback = function(args)
      local client = vim.lsp.get_client_by_id(args.data.client_id)
      if client and client.name == NAME then
        on_detach(args.buf)
      end
    end,
  })

  local config = {
    cmd = cmd,
    filetypes = #M.config.filetypes > 0 and M.config.filetypes or nil,
    root_markers = M.config.root_markers,
    -- client.several_edits: next_edit.lua shows and applies every edit of an answer, so
    -- the server need not join them into one, as it does for Copilot's clients.
    init_options = as_object(vim.tbl_extend("force", init_options, { client = { several_edits = true } })),
    handlers = { ["window/showMessage"] = show_message },
    -- One server for every buffer, whatever its root: each server loads its own models.
    reuse_client = function(client, config)
      return client.name == config.name and not client:is_stopped()
    end,
    on_exit = function()
      stats.value, stats.asked_at = nil, nil
    end,
  }
  if registered then
    vim.lsp.config[NAME] = config -- setup() again: replace, as merging would mix old lists in
  else
    vim.lsp.config(NAME, config) -- on top of what the user may have set with vim.lsp.config
  end
  registered = true
  vim.lsp.enable(NAME)
end

return M
