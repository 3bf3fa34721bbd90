-- Health of an Open Cluster Management ManifestWork, for Argo CD: the value of
-- resource.customizations.health.work.open-cluster-management.io_ManifestWork in argocd-cm (argocd-pull, internal/cmp).
-- Healthy when the work agent has applied the current generation, every resource is available and the status it
-- reports back is healthy; Progressing while it applies or a rollout goes on; Degraded, with the failing
-- resource's message, when a resource cannot be applied or its rollout failed. The per-kind rules are Argo CD's own
-- (gitops-engine's pkg/health), computed from the status feedback `argocd-pull cmp generate` asks the agent for.
-- Argo CD runs health scripts without the string and math libraries: only base functions and tables here.

local function condition(conditions, conditionType)
  if conditions == nil then
    return nil
  end
  for _, c in ipairs(conditions) do
    if c.type == conditionType then
      return c
    end
  end
  return nil
end

local function feedback(manifest)
  local values = {}
  if manifest.statusFeedback == nil or manifest.statusFeedback.values == nil then
    return values
  end
  for _, v in ipairs(manifest.statusFeedback.values) do
    local f = v.fieldValue
    if f ~= nil then
      if f.type == "Integer" then
        values[v.name] = f.integer
      elseif f.type == "String" then
        values[v.name] = f.string
      elseif f.type == "Boolean" then
        values[v.name] = f.boolean
      end
    end
  end
  return values
end

local function n(v)
  if v == nil then
    return 0
  end
  return v
end

local function s(v)
  if v == nil then
    return "0"
  end
  return tostring(v)
end

local waitingForFeedback = "Waiting for the work agent to report the status"

-- Each check takes the feedback values, the resource's name and its manifest in the work's spec, and returns a
-- health status and message.
local checks = {}

checks["apps/Deployment"] = function(v, name, desired)
  if v.Generation == nil then
    return "Progressing", waitingForFeedback
  end
  if v.Paused == true then
    return "Suspended", "Deployment is paused"
  end
  if n(v.ObservedGeneration) < v.Generation then
    return "Progressing", "Waiting for rollout to finish: observed deployment generation less than desired generation"
  end
  if v.ProgressingReason == "ProgressDeadlineExceeded" then
    local msg = "Deployment \"" .. name .. "\" exceeded its progress deadline"
    if v.ProgressingMessage ~= nil and v.ProgressingMessage ~= "" then
      msg = msg .. ": " .. v.ProgressingMessage
    end
    return "Degraded", msg
  end
  if v.DesiredReplicas ~= nil and n(v.UpdatedReplicas) < v.DesiredReplicas then
    return "Progressing", "Waiting for rollout to finish: " .. s(v.UpdatedReplicas) .. " out of " .. s(v.DesiredReplicas) .. " new replicas have been updated..."
  end
  if n(v.Replicas) > n(v.UpdatedReplicas) then
    return "Progressing", "Waiting for rollout to finish: " .. s(n(v.Replicas) - n(v.UpdatedReplicas)) .. " old replicas are pending termination..."
  end
  if n(v.AvailableReplicas) < n(v.UpdatedReplicas) then
    return "Progressing", "Waiting for rollout to finish: " .. s(v.AvailableReplicas) .. " of " .. s(v.UpdatedReplicas) .. " updated replicas are available..."
  end
  if desired ~= nil and desired.spec ~= nil and desired.spec.replicas ~= nil and v.DesiredReplicas ~= nil and desired.spec.replicas ~= v.DesiredReplicas then
    return "Progressing", "The cluster runs " .. s(v.DesiredReplicas) .. " replicas, the work asks for " .. s(desired.spec.replicas) .. ": waiting for the work agent to apply it again"
  end
  return "Healthy", ""
end

checks["apps/StatefulSet"] = function(v, name, desired)
  if v.Generation == nil then
    return "Progressing", waitingForFeedback
  end
  if n(v.ObservedGeneration) == 0 or v.Generation > n(v.ObservedGeneration) then
    return "Progressing", "Waiting for statefulset spec update to be observed..."
  end
  if v.DesiredReplicas ~= nil and n(v.ReadyReplicas) < v.DesiredReplicas then
    return "Progressing", "Waiting for " .. s(v.DesiredReplicas - n(v.ReadyReplicas)) .. " pods to be ready..."
  end
  if v.UpdateStrategy == "RollingUpdate" and v.Partition ~= nil then
    if v.DesiredReplicas ~= nil and n(v.UpdatedReplicas) < v.DesiredReplicas - v.Partition then
      return "Progressing", "Waiting for partitioned roll out to finish: " .. s(v.UpdatedReplicas) .. " out of " .. s(v.DesiredReplicas - v.Partition) .. " new pods have been updated..."
    end
    return "Healthy", "partitioned roll out complete: " .. s(v.UpdatedReplicas) .. " new pods have been updated..."
  end
  if v.UpdateStrategy == "OnDelete" then
    return "Healthy", "statefulset has " .. s(v.ReadyReplicas) .. " ready pods"
  end
  if v.UpdateRevision ~= v.CurrentRevision then
    return "Progressing", "waiting for statefulset rolling update to complete " .. s(v.UpdatedReplicas) .. " pods at revision " .. tostring(v.UpdateRevision) .. "..."
  end
  return "Healthy", "statefulset rolling update complete " .. s(v.CurrentReplicas) .. " pods at revision " .. tostring(v.CurrentRevision) .. "..."
end

checks["apps/DaemonSet"] = function(v, name, desired)
  if v.Generation == nil then
    return "Progressing", waitingForFeedback
  end
  if v.Generation > n(v.ObservedGeneration) then
    return "Progressing", "Waiting for rollout to finish: observed daemon set generation less than desired generation"
  end
  if v.UpdateStrategy == "OnDelete" then
    return "Healthy", "daemon set " .. s(v.UpdatedNumberScheduled) .. " out of " .. s(v.DesiredNumberScheduled) .. " new pods have been updated"
  end
  if n(v.UpdatedNumberScheduled) < n(v.DesiredNumberScheduled) then
    return "Progressing", "Waiting for daemon set \"" .. name .. "\" rollout to finish: " .. s(v.UpdatedNumberScheduled) .. " out of " .. s(v.DesiredNumberScheduled) .. " new pods have been updated..."
  end
  if n(v.NumberAvailable) < n(v.DesiredNumberScheduled) then
    return "Progressing", "Waiting for daemon set \"" .. name .. "\" rollout to finish: " .. s(v.NumberAvailable) .. " of " .. s(v.DesiredNumberScheduled) .. " updated pods are available..."
  end
  return "Healthy", ""
end

checks["apps/ReplicaSet"] = function(v, name, desired)
  if v.Generation == nil then
    return "Progressing", waitingForFeedback
  end
  if v.Generation > n(v.ObservedGeneration) then
    return "Progressing", "Waiting for rollout to finish: observed replica set generation less than desired generation"
  end
  if v.ReplicaFailure == "True" then
    return "Degraded", tostring(v.ReplicaFailureMessage)
  end
  if v.DesiredReplicas ~= nil and n(v.AvailableReplicas) < v.DesiredReplicas then
    return "Progressing", "Waiting for rollout to finish: " .. s(v.AvailableReplicas) .. " out of " .. s(v.DesiredReplicas) .. " new replicas are available..."
  end
  return "Healthy", ""
end

checks["batch/Job"] = function(v, name, desired)
  if v.JobFailed == "True" then
    return "Degraded", v.JobFailedMessage or ""
  end
  if v.JobSuspended == "True" then
    return "Suspended", ""
  end
  if v.JobComplete == "True" then
    return "Healthy", v.JobCompleteMessage or ""
  end
  return "Progressing", ""
end

checks["/Pod"] = function(v, name, desired)
  local message = v.PodMessage or ""
  if v.PodPhase == nil then
    return "Progressing", waitingForFeedback
  end
  if v.PodPhase == "Pending" then
    return "Progressing", message
  end
  if v.PodPhase == "Succeeded" then
    return "Healthy", message
  end
  if v.PodPhase == "Failed" then
    return "Degraded", message
  end
  if v.PodPhase == "Running" then
    if v.RestartPolicy == "Always" or v.RestartPolicy == nil then
      if v.PodReady == "True" then
        return "Healthy", message
      end
      return "Progressing", message
    end
    return "Progressing", message
  end
  return "Unknown", message
end

checks["/PersistentVolumeClaim"] = function(v, name, desired)
  if v.Phase == "Bound" then
    return "Healthy", ""
  end
  if v.Phase == "Lost" then
    return "Degraded", ""
  end
  if v.Phase == "Pending" or v.Phase == nil then
    return "Progressing", ""
  end
  return "Unknown", ""
end

local rank = { Healthy = 0, Suspended = 1, Progressing = 2, Unknown = 3, Degraded = 4 }

local cluster = obj.metadata.namespace or ""

if obj.metadata.deletionTimestamp ~= nil then
  return { status = "Progressing", message = "The work agent of cluster " .. cluster .. " is removing the resources" }
end
if obj.status == nil or obj.status.conditions == nil or #obj.status.conditions == 0 then
  return { status = "Progressing", message = "Waiting for the work agent of cluster " .. cluster .. " to apply the work" }
end

local conditions = obj.status.conditions
local generation = obj.metadata.generation
local applied = condition(conditions, "Applied")
if applied == nil or (generation ~= nil and applied.observedGeneration ~= nil and applied.observedGeneration < generation) then
  return { status = "Progressing", message = "Waiting for the work agent of cluster " .. cluster .. " to apply generation " .. s(generation) }
end

local desiredManifests = {}
if obj.spec ~= nil and obj.spec.workload ~= nil and obj.spec.workload.manifests ~= nil then
  desiredManifests = obj.spec.workload.manifests
end

local worst, worstMessage, others, total = "Healthy", "", 0, 0
local resources = {}
if obj.status.resourceStatus ~= nil and obj.status.resourceStatus.manifests ~= nil then
  resources = obj.status.resourceStatus.manifests
end
for _, m in ipairs(resources) do
  total = total + 1
  local meta = m.resourceMeta or {}
  local id = tostring(meta.kind) .. " "
  if meta.namespace ~= nil and meta.namespace ~= "" then
    id = id .. meta.namespace .. "/"
  end
  id = id .. tostring(meta.name)
  local status, message = nil, ""
  local resourceApplied = condition(m.conditions, "Applied")
  local resourceAvailable = condition(m.conditions, "Available")
  local resourceDegraded = condition(m.conditions, "Degraded")
  if resourceApplied ~= nil and resourceApplied.status == "False" then
    status, message = "Degraded", resourceApplied.message or ""
  elseif resourceDegraded ~= nil and resourceDegraded.status == "True" then
    status, message = "Degraded", resourceDegraded.message or ""
  elseif resourceAvailable ~= nil and resourceAvailable.status == "False" then
    status, message = "Progressing", resourceAvailable.message or "not available on the cluster"
  else
    local check = checks[(meta.group or "") .. "/" .. tostring(meta.kind)]
    if check ~= nil then
      local desired = nil
      if meta.ordinal ~= nil then
        desired = desiredManifests[meta.ordinal + 1]
      end
      status, message = check(feedback(m), tostring(meta.name), desired)
    end
  end
  if status ~= nil and status ~= "Healthy" then
    if rank[status] > rank[worst] then
      worstMessage = id
      if message ~= nil and message ~= "" then
        worstMessage = id .. ": " .. message
      end
      worst, others = status, 0
    elseif rank[status] == rank[worst] then
      others = others + 1
    end
  end
end

if worst ~= "Healthy" then
  if others > 0 then
    worstMessage = worstMessage .. " (and " .. s(others) .. " more)"
  end
  return { status = worst, message = worstMessage }
end

if applied.status ~= "True" then
  return { status = "Degraded", message = applied.message or "The work agent could not apply the work" }
end
local degraded = condition(conditions, "Degraded")
if degraded ~= nil and degraded.status == "True" then
  return { status = "Degraded", message = degraded.message or "" }
end
local available = condition(conditions, "Available")
if available == nil or available.status ~= "True" or (generation ~= nil and available.observedGeneration ~= nil and available.observedGeneration < generation) then
  local message = "Waiting for the resources to be available on cluster " .. cluster
  if available ~= nil and available.message ~= nil and available.message ~= "" then
    message = message .. ": " .. available.message
  end
  return { status = "Progressing", message = message }
end
return { status = "Healthy", message = s(total) .. " resources applied and available on cluster " .. cluster }
