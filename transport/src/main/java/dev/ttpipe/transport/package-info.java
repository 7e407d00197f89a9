/** ttpipe transport. */
package dev.ttpipe.transport;
