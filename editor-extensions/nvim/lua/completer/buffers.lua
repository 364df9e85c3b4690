-- What ghost.lua and next_edit.lua keep for each buffer they are attached to, and the
-- bookkeeping of it, which is the same in both: a debounce timer, the number of the latest
-- request (an answer to an older one is stale, and dropped), the request in flight
-- (cancelled when a newer one or a clear comes), and an augroup for the module's
-- autocommands in the buffer, deleted on detach. Only what each module draws differs:
-- its `hide` clears that.

local M = {}

local REQUEST_CANCELLED, CONTENT_MODIFIED = -32800, -32801

local Buffers = {}
Buffers.__index = Buffers

--- The buffers of one module. `group` names their augroups ("completer.ghost": one
--- "completer.ghost.<buf>" a buffer); `hide(buf, state)` drops what the module shows in
--- `buf` (its suggestion, its extmarks) when the buffer is cleared.
function M.new(group, hide)
  return setmetatable({ group = group, hide = hide, states = {} }, Buffers)
end

--- The state of `buf`: the module's own fields and { timer (the debounce), seq (the
--- number of the latest request or clear: an answer to an older one is stale), pending =
--- {client, id, ...}? (the request in flight) }; nil when `buf` is not attached.
function Buffers:get(buf)
  return self.states[buf]
end

--- Attach `buf`: its state is `fields` with a timer and seq added. Returns the augroup
--- for the module's autocommands in `buf`, or nil when `buf` was attached already.
function Buffers:attach(buf, fields)
  if self.states[buf] then
    return nil
  end
  self.states[buf] = vim.tbl_extend("error", fields, { timer = assert(vim.uv.new_timer()), seq = 0 })
  return vim.api.nvim_create_augroup(self.group .. "." .. buf, { clear = true })
end

--- Cancel the request in flight for `buf`, if any: the newest wins.
function Buffers:cancel(buf)
  local state = self.states[buf]
  local pending = state and state.pending
  if pending then
    state.pending = nil
    if not pending.client:is_stopped() then
      pending.client:cancel_request(pending.id)
    end
  end
end

--- Stop the debounce timer of `buf`, make an answer in flight stale, cancel the pending
--- request and hide what the module shows.
function Buffers:clear(buf)
  local state = self.states[buf]
  if not state then
    return
  end
  state.timer:stop()
  state.seq = state.seq + 1 -- an answer still in flight is stale now
  self:cancel(buf)
  self.hide(buf, state)
end

--- Clear every buffer for which `which(buf)` holds (when suggestions are turned off there).
function Buffers:clear_all(which)
  for buf in pairs(self.states) do
    if which(buf) then
      self:clear(buf)
    end
  end
end

--- Clear `buf` and forget it: its timer, its state and its autocommands go.
function Buffers:detach(buf)
  local state = self.states[buf]
  if not state then
    return
  end
  self:clear(buf)
  state.timer:close()
  self.states[buf] = nil
  pcall(vim.api.nvim_del_augroup_by_name, self.group .. "." .. buf)
end

--- The state of `buf` when the answer to its request `seq` is one to show: no newer
--- request or clear came since, and it is no error. The request is no longer pending
--- then either way; an error other than a cancellation is logged as `method` failing.
function Buffers:answered(buf, seq, method, err)
  local state = self.states[buf]
  if not state or seq ~= state.seq then
    return nil -- superseded: a newer request or a clear (a change clears) came since
  end
  state.pending = nil
  if err then
    if err.code ~= REQUEST_CANCELLED and err.code ~= CONTENT_MODIFIED then
      vim.lsp.log.warn("completer: " .. method .. " failed", err)
    end
    return nil
  end
  return state
end

return M
