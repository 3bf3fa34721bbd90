// argocd-pull: the text input with suggestions of Argo CD v3.2's list filters (labels and the like).
import * as React from 'react';

export interface AutocompleteProps {
    items: string[];
    value?: string;
    placeholder?: string;
    abbreviations?: Map<string, string>;
    onChange?: (e: React.ChangeEvent<HTMLInputElement>) => void;
    onItemClick?: (item: string) => void;
    style?: React.CSSProperties;
    inputStyle?: React.CSSProperties;
}

export const Autocomplete = (props: AutocompleteProps) => {
    const [open, setOpen] = React.useState(false);
    const value = props.value || '';
    const label = (item: string) => (props.abbreviations && props.abbreviations.get(item)) || item;
    const matches = (props.items || []).filter(item => item.toLowerCase().includes(value.toLowerCase())).slice(0, 50);
    return (
        <div style={{position: 'relative', ...props.style}} onBlur={() => setTimeout(() => setOpen(false), 150)}>
            <input
                className='argo-field'
                style={{width: '100%', ...props.inputStyle}}
                placeholder={props.placeholder}
                value={value}
                onFocus={() => setOpen(true)}
                onChange={e => {
                    setOpen(true);
                    if (props.onChange) {
                        props.onChange(e);
                    }
                }}
                onKeyDown={e => {
                    if (e.key === 'Enter' && props.onItemClick) {
                        props.onItemClick(matches.length === 1 ? matches[0] : value);
                    }
                }}
            />
            {open && matches.length > 0 && (
                <div style={{position: 'absolute', zIndex: 20, left: 0, right: 0, maxHeight: '20em', overflowY: 'auto', background: '#fff', boxShadow: '0 2px 6px rgba(0,0,0,.3)'}}>
                    {matches.map(item => (
                        <div
                            key={item}
                            style={{padding: '4px 8px', cursor: 'pointer', color: '#363c4a'}}
                            onMouseDown={e => {
                                e.preventDefault();
                                setOpen(false);
                                if (props.onItemClick) {
                                    props.onItemClick(item);
                                }
                            }}>
                            {label(item)}
                        </div>
                    ))}
                </div>
            )}
        </div>
    );
};
