package workclient

// statusVocabulary is the dictionary a store's status codec starts with: the words that the statuses of the
// works of Argo CD Applications repeat, in the store's encoding (strings follow their length, which DEFLATE
// matches as well without). It holds the OCM work agent's conditions of works and manifests, the feedback
// names of argocd-pull's rules (appstatus), and an Argo CD Application status as JSON with the field names
// and the common values of each section. What it does not hold (a fleet's repositories, namespaces and
// resources) the store learns from its first status with feedback. Changing it changes nothing kept: a
// store's codecs live as long as the store.
const statusVocabulary = `` +
	// The work agent's conditions.
	`AppliedAppliedManifestWorkCompleteApply manifest work complete` +
	`AppliedManifestWorkFailedFailed to apply manifest work` +
	`AvailableResourcesAvailableAll resources are available` +
	`ResourcesNotAvailableOne or more resources are not available` +
	`AppliedManifestCompleteApply manifest complete` +
	`AppliedManifestFailedFailed to apply manifest: ` +
	`ResourceAvailableResource is available` +
	`ResourceNotAvailableResource is not available` +
	`StatusFeedbackSyncedStatusFeedbackSyncedStatusFeedbackSyncedFalse` +
	`NoStatusFeedbackSyncedStatusFeedbackSyncedTrue` +
	`DeletedManifestWorkDeleted` +
	// The manifests of an Application's work.
	`namespacesNamespace` +
	`argoproj.iov1alpha1appprojectsAppProjectargocd` +
	`argoproj.iov1alpha1applicationsApplication` +
	// argocd-pull's feedback names and value types.
	`syncStatusStringhealthStatusStringrevisionStringoperationPhaseString` +
	`operationStartedAtStringoperationFinishedAtStringoperationMessageString` +
	`operationMarkerStringuidStringIntegerBoolean` +
	`status.sourceTypesJsonRaw` +
	`status.controllerNamespaceJsonRaw"argocd"` +
	`status.summaryJsonRaw{"images":["` +
	`status.conditionsJsonRaw[{"type":"ComparisonError","message":"` +
	`status.historyJsonRaw[{"revision":"","deployedAt":"","id":0,"source":{"repoURL":"","path":"","targetRevision":""},"deployStartedAt":"","initiatedBy":{"automated":true}}]` +
	`status.sourceTypeJsonRaw"Directory""Helm""Kustomize""Plugin"` +
	`status.operationStateJsonRaw{"operation":{"sync":{"revision":"","prune":true,"syncOptions":["CreateNamespace=true"]},` +
	`"initiatedBy":{"username":"admin","automated":true},"info":[{"name":"argocd-pull.io/operation","value":""}],"retry":{"limit":5}},` +
	`"phase":"Succeeded","message":"successfully synced (all tasks run)","syncResult":{"resources":[` +
	`{"group":"apps","version":"v1","kind":"Deployment","namespace":"","name":"","status":"Synced","message":"deployment.apps/ created","hookPhase":"Running","syncPhase":"Sync"},` +
	`{"group":"","version":"v1","kind":"Service","namespace":"","name":"","status":"Synced","message":"service/ created","hookPhase":"Running","syncPhase":"Sync"},` +
	`{"group":"","version":"v1","kind":"ConfigMap","namespace":"","name":"","status":"Synced","message":"configmap/ created","hookPhase":"Running","syncPhase":"Sync"}],` +
	`"revision":"","source":{"repoURL":"","path":"","targetRevision":"HEAD"}},"startedAt":"","finishedAt":""}` +
	`status.healthJsonRaw{"status":"Healthy","lastTransitionTime":""}{"status":"Progressing","message":"Waiting for rollout to finish"}{"status":"Degraded"}{"status":"Missing"}` +
	`status.resourcesJsonRaw[{"group":"apps","version":"v1","kind":"Deployment","namespace":"","name":"","status":"Synced","health":{"status":"Healthy"}},` +
	`{"version":"v1","kind":"Service","namespace":"","name":"","status":"Synced","health":{"status":"Healthy"}},` +
	`{"version":"v1","kind":"ConfigMap","namespace":"","name":"","status":"Synced"},{"version":"v1","kind":"Secret","namespace":"","name":"","status":"OutOfSync","requiresPruning":true}]` +
	`status.syncJsonRaw{"status":"Synced","comparedTo":{"source":{"repoURL":"https://github.com/","path":"","targetRevision":"HEAD"},` +
	`"destination":{"server":"https://kubernetes.default.svc","namespace":""}},"revision":""}{"status":"OutOfSync"}{"status":"Unknown"}` +
	`syncStatusStringSynchealthStatusStringHealthyrevisionStringoperationPhaseStringSucceeded`
