// argocd-pull: the small icon button of Argo CD v3.2's pod view quick actions (icon is a Font Awesome class).
import * as React from 'react';

export interface ActionButtonProps {
    action?: (e: React.MouseEvent) => void;
    label?: string;
    icon?: string;
    tooltip?: string;
    disabled?: boolean;
    style?: React.CSSProperties;
}

export const ActionButton = (props: ActionButtonProps) => (
    <button
        className={'argo-button argo-button--base-o' + (props.disabled ? ' disabled' : '')}
        style={{padding: '0 8px', ...props.style}}
        title={props.tooltip}
        disabled={props.disabled}
        onClick={e => props.action && props.action(e)}>
        {props.icon && <i className={props.icon.startsWith('fa') ? 'fa ' + props.icon : props.icon} />}
        {props.label && <span style={{marginLeft: props.icon ? '4px' : 0}}>{props.label}</span>}
    </button>
);
