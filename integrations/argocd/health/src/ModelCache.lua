-- ModelCache: status.phase (Pending, Resolving, Downloading, Verifying, Ready, Failed).
local late = ahead(o, status)
if late ~= nil then return late end
local phase = str(status.phase)
if phase == "" then
  return {status = "Progressing", message = "waiting for the operator to report a phase"}
end
local detail = str(status.message)
if detail == "" then detail = said(condition(status, "Ready"), "") end
local message = phase
if detail ~= "" then message = phase .. ": " .. detail end
if phase == "Ready" then return {status = "Healthy", message = message} end
if phase == "Failed" then return {status = "Degraded", message = message} end
if phase == "Pending" or phase == "Resolving" or phase == "Downloading" or phase == "Verifying" then
  return {status = "Progressing", message = message}
end
return {status = "Unknown", message = "unknown phase " .. message}
