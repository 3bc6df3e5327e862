-- InferenceCluster: the Ready condition (minReadyNodes of the member nodes are Ready).
local late = ahead(o, status)
if late ~= nil then return late end
local ready = condition(status, "Ready")
if ready == nil then return {status = "Progressing", message = "waiting for the operator to count its nodes"} end
if ready.status == "True" then return {status = "Healthy", message = said(ready, "Ready")} end
if ready.status == "False" then return {status = "Degraded", message = said(ready, "not Ready")} end
return {status = "Progressing", message = said(ready, "Ready unknown")}
