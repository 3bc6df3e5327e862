-- InferenceBenchmark: status.phase (Pending, Running, Succeeded, Failed).
local late = ahead(o, status)
if late ~= nil then return late end
local phase = str(status.phase)
if phase == "" then
  return {status = "Progressing", message = "waiting for the operator to report a phase"}
end
local failed = condition(status, "Failed")
if phase == "Succeeded" then return {status = "Healthy", message = "Succeeded"} end
if phase == "Failed" then return {status = "Degraded", message = "Failed: " .. said(failed, "no reason given")} end
if phase == "Pending" or phase == "Running" then
  return {status = "Progressing", message = phase .. ": " .. said(condition(status, "TargetReady"), "")}
end
return {status = "Unknown", message = "unknown phase " .. phase}
