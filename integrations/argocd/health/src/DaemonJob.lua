-- DaemonJob: status.state. A finished job (succeeded, failed, cancelled, lost) is a record of
-- one request, Healthy whatever its outcome (the outcome is in the message); a job waiting for
-- an answer to its prompt is Suspended. A spec change (a cancel) the executor has not observed
-- yet (observedGeneration below generation) is Progressing.
local late = ahead(o, status)
if late ~= nil then return late end
local state = str(status.state)
if state == "" then return {status = "Progressing", message = "queued: not picked up yet"} end
if state == "succeeded" or state == "cancelled" then return {status = "Healthy", message = state} end
if state == "failed" or state == "lost" then
  local err = tbl(status.error)
  local detail = str(err.message)
  if str(err.type) ~= "" then detail = str(err.type) .. ": " .. detail end
  return {status = "Healthy", message = "finished " .. state .. ": " .. detail}
end
if state == "waiting_input" then
  return {status = "Suspended", message = "waiting_input: " .. str(tbl(status.prompt).message)}
end
if state == "queued" or state == "starting" or state == "running" or state == "cancelling" then
  return {status = "Progressing", message = state}
end
return {status = "Unknown", message = "unknown state " .. state}
