-- InferenceWorkload: status.phase and the Ready condition (docs/install.md "Argo CD").
local late = ahead(o, status)
if late ~= nil then return late end
local phase = str(status.phase)
local ready = condition(status, "Ready")
if phase == "" then
  return {status = "Progressing", message = "waiting for the operator to report a phase"}
end
local message = said(ready, "no Ready condition yet")
if ready == nil or str(ready.reason) ~= phase then message = phase .. ": " .. message end
if phase == "Running" then return {status = "Healthy", message = message} end
if phase == "Pending" or phase == "Starting" or phase == "Updating" then
  return {status = "Progressing", message = message}
end
if phase == "Sleeping" or phase == "Stopped" or phase == "ScaledToZero" then
  return {status = "Suspended", message = message}
end
if phase == "Degraded" or phase == "Failed" then return {status = "Degraded", message = message} end
return {status = "Unknown", message = "unknown phase " .. message}
