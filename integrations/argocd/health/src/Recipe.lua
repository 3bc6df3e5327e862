-- Recipe: the Valid condition.
local late = ahead(o, status)
if late ~= nil then return late end
local valid = condition(status, "Valid")
if valid == nil then return {status = "Progressing", message = "waiting for the operator to validate it"} end
if valid.status == "True" then return {status = "Healthy", message = said(valid, "Valid")} end
if valid.status == "False" then return {status = "Degraded", message = said(valid, "Invalid")} end
return {status = "Progressing", message = said(valid, "validation pending")}
