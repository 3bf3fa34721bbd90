// argocd-pull: Argo CD v3.2 registers key bindings with one options object; react-keyhooks takes the same
// three values as arguments. The optional target (the elements a binding is limited to) is not supported:
// such bindings apply to the whole page.
import * as React from 'react';
import * as keyhooks from 'react-keyhooks';

export {Key, NumKey, NumPadKey, NumKeyToNumber, useNav} from 'react-keyhooks';

export interface KeybindingOptions {
    keys: keyhooks.AnyKeys;
    action: keyhooks.KeyAction;
    combo?: boolean;
    target?: unknown;
}

export const KeybindingContext = React.createContext<{useKeybinding: (o: KeybindingOptions) => void}>({
    useKeybinding: () => undefined
});

const Adapter = (props: {children: React.ReactNode}) => {
    const inner = React.useContext(keyhooks.KeybindingContext);
    const useKeybinding = (o: KeybindingOptions) => inner.useKeybinding(o.keys, o.action, o.combo);
    return <KeybindingContext.Provider value={{useKeybinding}}>{props.children}</KeybindingContext.Provider>;
};

export const KeybindingProvider = (props: {children: React.ReactNode}) => (
    <keyhooks.KeybindingProvider>
        <Adapter>{props.children}</Adapter>
    </keyhooks.KeybindingProvider>
);
