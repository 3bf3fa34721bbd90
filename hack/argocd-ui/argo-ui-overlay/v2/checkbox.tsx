// argocd-pull: the controlled check box Argo CD v3.2 imports from argo-ui/v2 (value, onChange, style).
import * as React from 'react';

require('./checkbox.scss');

export const Checkbox = (props: {value?: boolean; onChange?: (value: boolean) => void; style?: React.CSSProperties}) => {
    const [value, setValue] = React.useState(!!props.value);
    React.useEffect(() => setValue(!!props.value), [props.value]);
    return (
        <div
            className={'argo-checkbox' + (value ? ' argo-checkbox--selected' : '')}
            style={props.style}
            onClick={e => {
                e.stopPropagation();
                setValue(!value);
                if (props.onChange) {
                    props.onChange(!value);
                }
            }}>
            <i className='fa fa-check' />
        </div>
    );
};
