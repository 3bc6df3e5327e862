-- sparkrun.dev health check for Argo CD (Lua 5.1; gets `obj`, returns {status=, message=}).
-- Generated part: shared helpers, the same in every kind's script. Never raises on any input.
local function tbl(v)
  if type(v) == "table" then return v end
  return {}
end
local function str(v)
  if type(v) ~= "string" then return "" end
  if #v > 256 then return string.sub(v, 1, 256) .. "..." end
  return v
end
local function num(v)
  if type(v) == "number" then return v end
  return nil
end
local function condition(status, wanted)
  local list = tbl(status.conditions)
  for i = 1, 64 do
    local c = list[i]
    if c == nil then return nil end
    if type(c) == "table" and c.type == wanted then return c end
  end
  return nil
end
local function said(c, fallback)
  if c == nil then return fallback end
  local reason, message = str(c.reason), str(c.message)
  if reason ~= "" and message ~= "" then return reason .. ": " .. message end
  if message ~= "" then return message end
  if reason ~= "" then return reason end
  return fallback
end
local function ahead(o, status)
  local generation = num(tbl(o.metadata).generation)
  local observed = num(status.observedGeneration)
  if generation ~= nil and observed ~= nil and observed < generation then
    return {status = "Progressing", message = "spec changes not yet observed by the operator (generation "
      .. string.format("%d", generation) .. ", observed " .. string.format("%d", observed) .. ")"}
  end
  return nil
end
local o = tbl(obj)
local status = tbl(o.status)
