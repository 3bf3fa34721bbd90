// argocd-pull: the small helpers Argo CD v3.2 imports from argo-ui/v2.
import * as React from 'react';

export interface LoadError {
    state: boolean;
    retry: () => void;
}

// useData loads data once (or when dependencies change) and returns it with a loading flag and an error.
export function useData<T>(getData: () => Promise<T>, init?: T, callback?: (data: T) => void, dependencies?: any[]): [T, boolean, LoadError] {
    const [data, setData] = React.useState(init as T);
    const [loading, setLoading] = React.useState(true);
    const [failed, setFailed] = React.useState(false);
    const [attempt, setAttempt] = React.useState(0);
    React.useEffect(() => {
        let live = true;
        getData().then(
            d => {
                if (live) {
                    setData(d);
                    setLoading(false);
                    setFailed(false);
                    if (callback) {
                        callback(d);
                    }
                }
            },
            () => live && setFailed(true)
        );
        return () => {
            live = false;
        };
    }, [...(dependencies || []), attempt]);
    return [data, loading, {state: failed, retry: () => setAttempt(attempt + 1)}];
}

// ago says how long ago a moment was, in the largest whole unit ("3 minutes ago").
export function ago(date: Date): string {
    const seconds = Math.max(0, Math.round((Date.now() - date.getTime()) / 1000));
    const units: Array<[string, number]> = [
        ['year', 365 * 24 * 3600],
        ['month', 30 * 24 * 3600],
        ['day', 24 * 3600],
        ['hour', 3600],
        ['minute', 60],
        ['second', 1]
    ];
    for (const [name, size] of units) {
        const n = Math.floor(seconds / size);
        if (n >= 1) {
            return `${n} ${name}${n === 1 ? '' : 's'} ago`;
        }
    }
    return 'just now';
}
