// Passive RC connection setup: the shared setup listener (../setup-listener.ts) whose
// connections each carry one RC setup message (the RoCE counterpart of verbs.ts's Listener).

import type { RoceEndpoint } from './endpoint.ts';
import { SetupListener, type SetupListenOptions } from '../setup-listener.ts';
import { receiveRcRequest, type RcConnectionRequest, type RcSetupOptions } from './setup.ts';

export interface RcListenOptions extends RcSetupOptions, SetupListenOptions {}

export class RcListener extends SetupListener<RcConnectionRequest> {
  constructor(endpoint: RoceEndpoint, options: RcListenOptions, onRequest: ((request: RcConnectionRequest) => void) | undefined) {
    // Established side channels belong to their QPs: closing the listener does not wait for them.
    super(options, (socket) => receiveRcRequest(endpoint, socket, options), onRequest, 'RC setup message', false);
  }
}
