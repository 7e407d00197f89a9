/** ttpipe device-bridge. */
package dev.ttpipe.device;
