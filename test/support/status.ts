// The KBTP status a request ended with, as a name ('SUCCESS' when it succeeded), for tests that
// compare outcomes; anything but a KBTP status (a transport failure) is thrown on.
import { KbtpStatusError } from '../../host/kbtp/errors.ts';

export async function statusOf(work: Promise<unknown>): Promise<string> {
  try {
    await work;
    return 'SUCCESS';
  } catch (error) {
    if (error instanceof KbtpStatusError) return error.statusName;
    throw error;
  }
}
