// @modelcontextprotocol/sdk 1.x: Client over StdioClientTransport or
// StreamableHTTPClientTransport, cancelling with an AbortSignal; over HTTP
// the connection ends with transport.terminateSession() (DELETE /mcp). Over
// HTTP, then a 60 s run with a 30 s timeout that progress resets
// (common.mjs); over stdio the CLI suite's opencode job waits out the same
// run, and the Python SDK jobs show progress over both in 5 s.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StdioClientTransport } from '@modelcontextprotocol/sdk/client/stdio.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import * as c from './common.mjs';

const VERSION = c.packageVersion('@modelcontextprotocol/sdk');

await c.drive(
  'ts-sdk',
  VERSION,
  { Stdio: StdioClientTransport, Http: StreamableHTTPClientTransport, v1: true },
  async (transport, rep) => {
    // The Client hands the negotiated revision to the transport, if it takes it.
    let protocol = null;
    const setter = transport.setProtocolVersion ? transport.setProtocolVersion.bind(transport) : null;
    transport.setProtocolVersion = (v) => { protocol = v; if (setter) setter(v); };
    const client = new Client({ name: 'nsm-sdk-check', version: '1' });
    await client.connect(transport);
    rep.info(`negotiated: ${protocol} (initialize)`);
    return { client, protocol };
  },
  // resetTimeoutOnProgress: a 60 s run through a 30 s client timeout.
  c.TRANSPORT === 'http' ? c.longRunCheck : null,
);
