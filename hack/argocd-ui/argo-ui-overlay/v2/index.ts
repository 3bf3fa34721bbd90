// argocd-pull: the `argo-ui/v2` entry point that Argo CD v3.2's UI imports. The argo-ui release on npm
// (1.0.0) predates v2; the key bindings come from react-keyhooks (the npm package argo-ui later took them
// in from), the tool tip is argo-ui's own, and the rest is written here. See hack/argocd-ui/README.md.
export {Tooltip} from '../src/components/tooltip/tooltip';
export * from './keybinding';
export * from './checkbox';
export * from './autocomplete';
export * from './action-button';
export * from './utils';
